"""Compare a whole model's outputs with the default model's, with dtype-aware tolerances."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ireetune.verify.compare import compare_outputs


def outputs_match(
    expected: Sequence[npt.NDArray[np.generic]], actual: Sequence[npt.NDArray[np.generic]]
) -> tuple[bool, str]:
    """Say whether a model's outputs equal the default's within tolerance, and if not, why."""
    if len(expected) != len(actual):
        return False, f"{len(actual)} outputs instead of {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        type_name = (
            "f16" if want.dtype == np.float16 else "i32" if want.dtype.kind in "iu" else "f32"
        )
        # Outputs of a whole network accumulate many reductions; use a generous reduction size.
        comparison = compare_outputs(want, got, type_name, reduction_size=4096)
        if not comparison.matches:
            return (
                False,
                f"output {index}: {comparison.mismatched} of {comparison.total} elements differ",
            )
    return True, ""
