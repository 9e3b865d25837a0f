"""Compare a whole model's outputs with the default model's, with dtype-aware tolerances."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ireetune.core.input_archive import restore_bf16
from ireetune.verify.compare import compare_outputs


def outputs_match(
    expected: Sequence[npt.NDArray[np.generic]], actual: Sequence[npt.NDArray[np.generic]]
) -> tuple[bool, str]:
    """Say whether a model's outputs equal the default's within tolerance, and if not, why."""
    if len(expected) != len(actual):
        return False, f"{len(actual)} outputs instead of {len(expected)}"
    for index, (saved_want, saved_got) in enumerate(zip(expected, actual, strict=True)):
        # Outputs saved by a worker (`np.savez`) read back bf16 as raw bytes.
        want, got = restore_bf16(saved_want), restore_bf16(saved_got)
        type_name = _type_name(want.dtype)
        # Outputs of a whole network accumulate many reductions; use a generous reduction size.
        comparison = compare_outputs(want, got, type_name, reduction_size=4096)
        if not comparison.matches:
            return (
                False,
                f"output {index}: {comparison.mismatched} of {comparison.total} elements differ",
            )
    return True, ""


def _type_name(dtype: np.dtype[np.generic]) -> str:
    """Name the element type whose tolerance compares outputs of this dtype (integers and
    booleans exactly)."""
    if dtype.kind in "iub":
        return "i32"
    if dtype == np.float16:
        return "f16"
    return "bf16" if dtype.name == "bfloat16" else "f32"
