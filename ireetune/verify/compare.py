"""Random inputs for a problem, dtype-aware comparison of outputs, and the output checks of
reference programs against the default's."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ireetune.core.errors import IreetuneError
from ireetune.verify.runner import ReferenceBatch, ReferenceRun

if TYPE_CHECKING:
    from ireetune.executor.base import Executor

# The element types ireetune makes inputs for, as MLIR spells them: signless, and the signed
# (`si8`) and unsigned (`ui8`) integers and booleans (`i1`) of the torch dialect that ONNX and
# PyTorch models are imported into.
_NUMPY_DTYPES: dict[str, npt.DTypeLike] = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "si64": np.int64,
    "si32": np.int32,
    "si16": np.int16,
    "si8": np.int8,
    "ui64": np.uint64,
    "ui32": np.uint32,
    "ui16": np.uint16,
    "ui8": np.uint8,
    "i1": np.bool_,
}
SUPPORTED_ELEMENT_TYPES = (*_NUMPY_DTYPES, "bf16")


def numpy_dtype(type_name: str) -> npt.DTypeLike:
    """Map an MLIR element type name to a NumPy dtype (bf16 through ml_dtypes)."""
    if type_name in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[type_name]
    if type_name == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    raise ValueError(f"no NumPy dtype for element type {type_name}")


# Random inputs are held in memory, and written to disk, whole: a bound far above any dispatch
# worth tuning on one machine, and far below what would end in a MemoryError.
MAX_INPUT_BYTES = 16 << 30


def check_inputs(shapes: Sequence[tuple[int, ...]], type_names: Sequence[str], what: str) -> None:
    """Refuse, in one line, inputs whose element type has no NumPy dtype or that are too large.

    `what` names the inputs for the message, for example "the dispatch's inputs".
    """
    total_bytes = 0
    for shape, type_name in zip(shapes, type_names, strict=True):
        try:
            dtype = np.dtype(numpy_dtype(type_name))
        except ValueError:
            raise IreetuneError(
                f"{what} use element type {type_name}, which ireetune cannot make inputs for "
                f"(supported: {', '.join(SUPPORTED_ELEMENT_TYPES)})"
            ) from None
        total_bytes += math.prod(shape) * dtype.itemsize
    if total_bytes > MAX_INPUT_BYTES:
        raise IreetuneError(
            f"{what} take {total_bytes / 2**30:,.0f} GiB, more than ireetune makes inputs for "
            f"({MAX_INPUT_BYTES / 2**30:.0f} GiB)"
        )


def make_random_inputs(
    shapes: list[tuple[int, ...]], type_names: list[str], seed: int
) -> list[npt.NDArray[np.generic]]:
    """Draw inputs: small integers for integer types, standard normals for floats."""
    check_inputs(shapes, type_names, "the inputs")
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, type_name in zip(shapes, type_names, strict=True):
        dtype = numpy_dtype(type_name)
        if type_name == "i1":
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        elif type_name.startswith(("i", "si")):
            arrays.append(rng.integers(-4, 5, size=shape).astype(dtype))
        elif type_name.startswith("ui"):
            arrays.append(rng.integers(0, 9, size=shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(size=shape).astype(np.float32).astype(dtype))
    return arrays


def tolerance(output_type: str, reduction_size: int) -> tuple[float, float]:
    """Return (rtol, atol) for a result accumulated over `reduction_size` products.

    Integers must match exactly. For floats, a different tiling changes the summation order: its
    error grows like sqrt(K) round-offs of the (at least f32) accumulator, plus the final rounding
    to the result type; absolute errors scale with the typical magnitude sqrt(K) of a sum of K
    standard-normal products.
    """
    if output_type.startswith("i"):
        return 0.0, 0.0
    epsilon = {"f64": 2.2e-16, "f32": 1.2e-7, "f16": 9.8e-4, "bf16": 7.8e-3}.get(output_type, 1e-3)
    accumulator_epsilon = min(epsilon, 1.2e-7)
    scale = math.sqrt(max(1, reduction_size))
    rtol = 2 * epsilon + 16 * accumulator_epsilon * scale
    return rtol, rtol * scale


# Why a contender's outputs are not compared when its reference program compiled to the default's
# own binary: its config did not change the program, so the comparison would prove nothing.
CONFIG_NOT_APPLIED = "config not applied: the reference program is the default's own binary"


@dataclass(frozen=True)
class Comparison:
    matches: bool
    max_abs_error: float
    mismatched: int
    total: int


def compare_outputs(
    expected: npt.NDArray[np.generic],
    actual: npt.NDArray[np.generic],
    output_type: str,
    reduction_size: int,
) -> Comparison:
    """Compare a candidate's output with the default configuration's, elementwise."""
    if expected.shape != actual.shape:
        return Comparison(False, math.inf, int(expected.size), int(expected.size))
    rtol, atol = tolerance(output_type, reduction_size)
    expected64 = expected.astype(np.float64)
    actual64 = actual.astype(np.float64)
    close = np.isclose(actual64, expected64, rtol=rtol, atol=atol, equal_nan=False)
    # Equal values (infinities of one sign among them) are no error; a NaN on either side, or
    # infinities that differ, are an infinite one. Nothing warns: a model whose default gives
    # an infinity is the user's to read in the report, not in numpy's warnings.
    with np.errstate(invalid="ignore"):
        error = np.where(actual64 == expected64, 0.0, np.abs(actual64 - expected64))
    max_error = math.inf if np.isnan(error).any() else float(error.max(initial=0.0))
    mismatched = int(close.size - np.count_nonzero(close))
    return Comparison(mismatched == 0, max_error, mismatched, int(close.size))


@dataclass(frozen=True)
class OutputChecks:
    """Each program's output check against the default's (id 0), and the default's own run.

    `results` maps id -> (outputs equal the default's, why not): True when they were compared
    and equal, False when they were compared and differ, None when they could not be compared
    (no reference program, or one that did not run or is the default's own binary). `baseline`
    is None when the default's did not run; where it failed, nothing was compared.
    """

    results: dict[int, tuple[bool | None, str]]
    max_abs_errors: dict[int, float]
    baseline: ReferenceRun | None
    baseline_error: str = ""

    @property
    def baseline_ms(self) -> float | None:
        return self.baseline.median_ms if self.baseline is not None else None


def check_reference_outputs(
    executor: Executor,
    binaries: Mapping[int, tuple[Path | None, str]],
    inputs_path: Path,
    device: str,
    output_type: str,
    reduction_size: int,
) -> OutputChecks:
    """Run the reference programs of `binaries` (id -> (binary, hash) or (None, why it is
    missing)) on the inputs, on `executor`, in that order, and compare each one's outputs (left
    beside the inputs) to the default's. One whose binary is missing, fails to run, or equals
    the default's (its config did not change the program) is not compared."""
    baseline_binary, baseline_detail = binaries[0]
    baseline_hash = baseline_detail if baseline_binary is not None else ""
    results: dict[int, tuple[bool | None, str]] = {}
    runnable: list[tuple[int, Path, Path]] = []
    for candidate_id, (binary, detail) in binaries.items():
        if binary is None:
            results[candidate_id] = (None, detail)
        elif candidate_id and detail == baseline_hash:
            results[candidate_id] = (None, CONFIG_NOT_APPLIED)
        else:
            output = inputs_path.parent / f"output_{candidate_id}.npy"
            runnable.append((candidate_id, binary, output))
    runs = executor.run_reference_programs(ReferenceBatch(runnable, device, inputs_path))
    baseline_run = runs.get(0)
    errors: dict[int, float] = {}
    if baseline_run is None or baseline_run.output is None:
        return OutputChecks(results, errors, baseline_run)
    for candidate_id, _, _ in runnable:
        if candidate_id == 0:
            continue
        run = runs[candidate_id]
        if run.output is None:
            results[candidate_id] = (None, f"reference program failed: {run.reason}")
            continue
        comparison = compare_outputs(baseline_run.output, run.output, output_type, reduction_size)
        errors[candidate_id] = comparison.max_abs_error
        differ = f"outputs differ from the default's: {comparison.mismatched} of {comparison.total} elements"
        results[candidate_id] = (comparison.matches, "" if comparison.matches else differ)
    return OutputChecks(results, errors, baseline_run)
