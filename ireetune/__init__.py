"""ireetune: an autotuner for the IREE compiler that writes standard tuning specs.

The Python API (ireetune/api.py) is imported on first use, so that `import ireetune` stays
cheap: `ireetune.tune_dispatch`, `ireetune.tune_model`, `ireetune.tune_torch_module`,
`ireetune.profile` and `ireetune.apply`, with `ProgressEvent` (what `on_progress` receives) and
`ApplyResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ireetune.core.errors import IreetuneError
from ireetune.core.version import __version__ as __version__

if TYPE_CHECKING:
    from ireetune.api import (
        ApplyResult,
        ProgressEvent,
        apply,
        profile,
        tune_dispatch,
        tune_model,
        tune_torch_module,
    )

__all__ = [
    "ApplyResult",
    "IreetuneError",
    "ProgressEvent",
    "apply",
    "profile",
    "tune_dispatch",
    "tune_model",
    "tune_torch_module",
]

_API_NAMES = frozenset(__all__) - {"IreetuneError"}


def __getattr__(name: str) -> Any:
    """Import the Python API on first use of one of its names."""
    if name in _API_NAMES:
        from ireetune import api

        return getattr(api, name)
    raise AttributeError(f"module 'ireetune' has no attribute {name!r}")
