"""Turn dimension values, lists and ranges (and problem files) into a sweep of operations.

A dimension is written as in seeds/003: one value (`4096`), a list (`64,128`), a range
`start:stop:step` (`64:1024:128`; the stop is included when the steps land on it), or a mix
(`32,64:256:64`). The sweep is the cross product of every dimension, layout and type.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import parse_input_json, read_input_text
from ireetune.profiler.operations import (
    ALLOWED_ACCUMULATORS,
    DEFAULT_ACCUMULATOR,
    MAX_DIMENSION,
    ConvLayout,
    ConvOperation,
    MatmulLayout,
    MatmulOperation,
    Operation,
    OperationKind,
    check_operation,
    parse_element_type,
)

# The dimensions each operation kind takes, with the value used when none is given.
MATMUL_DIMENSIONS = {"m": "128", "n": "128", "k": "128"}
BATCH_MATMUL_DIMENSIONS = {"batch": "4", **MATMUL_DIMENSIONS}
CONV_DIMENSIONS = {
    "batch": "1",
    "height": "16",
    "width": "16",
    "channels": "16",
    "filters": "16",
    "kernel_h": "3",
    "kernel_w": "3",
    "stride": "1",
    "dilation": "1",
}
DIMENSIONS_BY_KIND = {
    OperationKind.MATMUL: MATMUL_DIMENSIONS,
    OperationKind.BATCH_MATMUL: BATCH_MATMUL_DIMENSIONS,
    OperationKind.MATMUL_BIAS_RELU: MATMUL_DIMENSIONS,
    OperationKind.CONV2D: CONV_DIMENSIONS,
}
# A sweep this large is almost certainly a typo in a range.
MAX_SWEEP = 100_000


def parse_dimension(text: str, what: str = "dimension") -> tuple[int, ...]:
    """Parse `64`, `64,128` or `64:1024:128` (or a comma list mixing them) into sorted values.

    A list of more than MAX_SWEEP values is refused from the ranges' lengths, before any of them
    is expanded (`8:1000000000:1` would fill the memory first).
    """
    values: list[int] = []
    count = 0
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise IreetuneError(f"--{what}: empty value in '{text}'")
        parts = item.split(":")
        try:
            numbers = [int(part) for part in parts]
        except ValueError:
            raise IreetuneError(
                f"--{what}: '{item}' is not an integer or start:stop:step"
            ) from None
        if len(numbers) == 1:
            count += 1
            values.append(numbers[0])
            continue
        if len(numbers) != 3:
            raise IreetuneError(f"--{what}: range '{item}' must be start:stop:step")
        start, stop, step = numbers
        if step < 1:
            raise IreetuneError(f"--{what}: range '{item}' needs a positive step")
        if start > stop:
            raise IreetuneError(f"--{what}: range '{item}' starts after it stops")
        # A range's length is arithmetic: nothing is expanded before the total is known.
        count += len(range(start, stop + 1, step))
        if count > MAX_SWEEP:
            raise IreetuneError(
                f"--{what}: '{text}' names over {MAX_SWEEP} sizes; narrow the ranges"
            )
        values.extend(range(start, stop + 1, step))
    if any(value < 1 for value in values):
        raise IreetuneError(f"--{what}: sizes must be at least 1 (got '{text}')")
    if any(value > MAX_DIMENSION for value in values):
        raise IreetuneError(f"--{what}: sizes must be at most {MAX_DIMENSION} (got '{text}')")
    return tuple(sorted(set(values)))


def _parse_choices(
    text: str, choices: type[MatmulLayout] | type[ConvLayout], what: str
) -> list[str]:
    names = [item.strip().lower() for item in text.split(",") if item.strip()]
    known = [choice.value for choice in choices]
    for name in names:
        if name not in known:
            raise IreetuneError(f"--{what}: unknown value '{name}'; choose from {', '.join(known)}")
    if not names:
        raise IreetuneError(f"--{what}: no value given")
    return names


def parse_operation_kind(text: str) -> OperationKind:
    try:
        return OperationKind(text.strip().lower().replace("-", "_"))
    except ValueError:
        known = ", ".join(kind.value for kind in OperationKind)
        raise IreetuneError(f"unknown operation '{text}'; choose from {known}") from None


@dataclass(frozen=True)
class SweepRequest:
    """One operation kind with its dimension, type and layout texts, as a user wrote them."""

    kind: OperationKind
    dimensions: Mapping[str, str] = field(default_factory=dict)
    dtypes: str = "f32"
    accumulators: str = ""
    layouts: str = ""


def expand_sweep(request: SweepRequest, budget: int = MAX_SWEEP) -> list[Operation]:
    """Cross a request's dimensions, layouts and types into operations (in a stable order).

    More than `budget` operations are refused from their count, before any is made.
    """
    expected = DIMENSIONS_BY_KIND[request.kind]
    unknown = sorted(set(request.dimensions) - set(expected))
    if unknown:
        raise IreetuneError(
            f"{request.kind.value} takes no {', '.join(unknown)} (it takes {', '.join(expected)})"
        )
    sizes = {
        name: parse_dimension(request.dimensions.get(name) or default, name.replace("_", "-"))
        for name, default in expected.items()
    }
    input_types = [parse_element_type(t) for t in request.dtypes.split(",") if t.strip()]
    if not input_types:
        raise IreetuneError("--dtype: no element type given")
    for input_type in input_types:
        if input_type not in DEFAULT_ACCUMULATOR:
            raise IreetuneError(
                f"--dtype: {input_type.value} is not an input type (use f32, f16, bf16, i8)"
            )
    asked_accumulators = [
        parse_element_type(t) for t in request.accumulators.split(",") if t.strip()
    ]
    type_pairs = [
        (input_type, accumulator)
        for input_type in input_types
        for accumulator in (asked_accumulators or [DEFAULT_ACCUMULATOR[input_type]])
        if accumulator in ALLOWED_ACCUMULATORS[input_type]
    ]
    if not type_pairs:
        raise IreetuneError(
            f"no input/accumulator pair fits: --dtype {request.dtypes} --acc {request.accumulators}"
        )
    is_conv = request.kind is OperationKind.CONV2D
    layouts = (
        _parse_choices(request.layouts or "nhwc_hwcf", ConvLayout, "layout")
        if is_conv
        else _parse_choices(request.layouts or "nn", MatmulLayout, "layout")
    )
    count = len(type_pairs) * len(layouts)
    for values in sizes.values():
        count *= len(values)
    if count > budget:
        raise IreetuneError(f"the sweep has over {MAX_SWEEP} operations; narrow the ranges")
    operations: list[Operation] = []
    names = list(sizes)
    for layout, (input_type, accumulator), combo in itertools.product(
        layouts, type_pairs, itertools.product(*sizes.values())
    ):
        shape = dict(zip(names, combo, strict=True))
        operations.append(
            ConvOperation(
                **shape,
                input_type=input_type,
                accumulator_type=accumulator,
                layout=ConvLayout(layout),
            )
            if is_conv
            else MatmulOperation(
                kind=request.kind,
                **shape,
                input_type=input_type,
                accumulator_type=accumulator,
                layout=MatmulLayout(layout),
            )
        )
    for operation in operations:
        check_operation(operation)
    return operations


def read_problem_file(path: Path) -> list[SweepRequest]:
    """Read shapes from a CSV (header row) or JSON (list of objects) problem file.

    Each row names its operation (`op`), its dimensions (`m`, `n`, `k`, `batch`, `height`, ...;
    each cell may itself be a list or range), `dtype`, optionally `acc` and `layout`:

        op,m,n,k,dtype,acc,layout
        matmul,2048,1280,5120,f16,f32,nt
    """
    text = read_input_text(path, "problem file")
    rows: list[Mapping[str, object]]
    if path.suffix.lower() == ".json":
        loaded = parse_input_json(text, path, "problem file")
        if not isinstance(loaded, list) or not all(isinstance(row, dict) for row in loaded):
            raise IreetuneError(f"{path}: a JSON problem file holds a list of objects")
        rows = loaded
    else:
        rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    if not rows:
        raise IreetuneError(f"{path} lists no problems")
    return [_request_from_row(row, path, number) for number, row in enumerate(rows, start=1)]


def _request_from_row(row: Mapping[str, object], path: Path, number: int) -> SweepRequest:
    cells = {
        str(key).strip().lower(): str(value).strip()
        for key, value in row.items()
        if value is not None
    }
    cells = {key: value for key, value in cells.items() if value}
    if "op" not in cells:
        raise IreetuneError(f"{path}, problem {number}: no 'op' given")
    kind = parse_operation_kind(cells.pop("op"))
    return SweepRequest(
        kind=kind,
        dtypes=cells.pop("dtype", "f32"),
        accumulators=cells.pop("acc", ""),
        layouts=cells.pop("layout", ""),
        dimensions=cells,
    )


def expand_requests(requests: Iterable[SweepRequest]) -> list[Operation]:
    """Expand every request and drop repeated operations, keeping the first occurrence's order."""
    seen: dict[str, Operation] = {}
    expanded = 0
    for request in requests:
        # The whole sweep, every request together, is bounded before each request expands.
        operations = expand_sweep(request, MAX_SWEEP - expanded)
        expanded += len(operations)
        for operation in operations:
            seen.setdefault(operation.name, operation)
    if not seen:
        raise IreetuneError("the sweep is empty")
    return list(seen.values())
