"""The inputs archive: a program's arguments in order, as `arg0`, `arg1`, ... of one `.npz` file.

Written where inputs are made (random operands, a model's inputs) and read by the runtime workers
that call the program with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def write_input_archive(path: Path, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
    """Save the arguments in order."""
    np.savez(path, **{f"arg{i}": array for i, array in enumerate(arrays)})  # type: ignore[arg-type]


def read_input_archive(path: str | Path) -> list[np.ndarray[Any, Any]]:
    """Load the arguments in order."""
    with np.load(path) as archive:
        return [archive[f"arg{i}"] for i in range(len(archive.files))]
