"""ireetune: an autotuner for the IREE compiler that writes standard tuning specs."""

from ireetune.core.errors import IreetuneError

__all__ = ["IreetuneError"]
__version__ = "0.1.0"
