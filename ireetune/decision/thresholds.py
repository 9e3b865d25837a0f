"""The speedups the decision rules ask for, where importing them costs nothing.

The command line's defaults name these (`tune --flag-threshold`), and building the parser must
not import the statistics (numpy) behind the rules.
"""

# A model-level change (a linked spec, a flag set) must make the whole model at least this much
# faster: the lower bound of its speedup's interval.
MODEL_THRESHOLD = 1.01
