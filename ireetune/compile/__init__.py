"""Compiling: candidates to binaries, in parallel, with timeouts and crash capture.

`driver.py` is the one typed request (`CompileRequest` -> `CompileResult`) under every
`iree-compile` and `iree-opt` run; `pool.py` compiles a batch in parallel and classifies each
outcome; `stage.py` compiles a run's candidates and sorts out what the binaries say (identical
to the baseline, duplicates); `overlap.py` measures each candidate as soon as it is compiled.
"""
