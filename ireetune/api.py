"""The Python API; the command line is a thin layer over these functions."""

from ireetune.dispatch_options import TuneOptions
from ireetune.dispatch_tuner import TuneResult, tune_dispatch
from ireetune.model_options import ModelTuneOptions
from ireetune.model_tuner import ModelTuneResult, tune_model, tune_torch_module

__all__ = [
    "ModelTuneOptions",
    "ModelTuneResult",
    "TuneOptions",
    "TuneResult",
    "tune_dispatch",
    "tune_model",
    "tune_torch_module",
]
