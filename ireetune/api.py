"""The Python API; the command line is a thin layer over these functions."""

from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.tuner import TuneResult, tune_dispatch
from ireetune.flows.model.options import ModelTuneOptions
from ireetune.flows.model.tuner import ModelTuneResult, tune_model, tune_torch_module

__all__ = [
    "ModelTuneOptions",
    "ModelTuneResult",
    "TuneOptions",
    "TuneResult",
    "tune_dispatch",
    "tune_model",
    "tune_torch_module",
]
