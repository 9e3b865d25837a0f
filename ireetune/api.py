"""The Python API; the command line is a thin layer over these functions."""

from ireetune.dispatch_tuner import TuneOptions, TuneResult, tune_dispatch

__all__ = ["TuneOptions", "TuneResult", "tune_dispatch"]
