"""The inputs archive: a program's arguments in order, as `arg0`, `arg1`, ... of one `.npz` file.

Written where inputs are made (random operands, a model's inputs) and read by the runtime workers
that call the program with them. NumPy stores the element types of `ml_dtypes` (bf16, the f8
types) as raw bytes (`|V2`), which the IREE runtime cannot map to an element type: such an
argument is stored as its bit pattern with its type's name beside it (`arg0_dtype`), and read
back as that type.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_DTYPE_SUFFIX = "_dtype"


def write_input_archive(path: Path, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
    """Save the arguments in order (an ml_dtypes argument as its bits and its type's name)."""
    entries: dict[str, np.ndarray[Any, Any]] = {}
    for index, array in enumerate(arrays):
        entries[f"arg{index}"] = array
        if array.dtype.type.__module__.startswith("ml_dtypes"):
            entries[f"arg{index}"] = array.view(f"u{array.dtype.itemsize}")
            entries[f"arg{index}{_DTYPE_SUFFIX}"] = np.array(array.dtype.name)
    np.savez(path, **entries)  # type: ignore[arg-type]


def read_input_archive(path: str | Path) -> list[np.ndarray[Any, Any]]:
    """Load the arguments in order, each of its own element type."""
    with np.load(path) as archive:
        count = sum(not name.endswith(_DTYPE_SUFFIX) for name in archive.files)
        arrays = []
        for index in range(count):
            array = archive[f"arg{index}"]
            type_name = f"arg{index}{_DTYPE_SUFFIX}"
            if type_name in archive.files:
                array = array.view(_ml_dtype(str(archive[type_name])))
            arrays.append(restore_bf16(array))
        return arrays


def restore_bf16(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Give bf16 back its type: `np.save` of an ml_dtypes bfloat16 array reads back as raw
    2-byte `V2` values (archives and outputs written without the type's name)."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        return array.view(_ml_dtype("bfloat16"))
    return array


def _ml_dtype(name: str) -> np.dtype[Any]:
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))
