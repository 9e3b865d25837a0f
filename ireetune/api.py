"""The Python API; the command line is a thin layer over these functions."""

from ireetune.dispatch_tuner import TuneOptions, TuneResult, tune_dispatch
from ireetune.model_tuner import ModelTuneOptions, ModelTuneResult, tune_model, tune_torch_module

__all__ = [
    "ModelTuneOptions",
    "ModelTuneResult",
    "TuneOptions",
    "TuneResult",
    "tune_dispatch",
    "tune_model",
    "tune_torch_module",
]
