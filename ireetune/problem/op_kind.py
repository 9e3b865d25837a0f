"""Name what a root op is, for the reasons a dispatch is not tuned.

A report that says "root op 'linalg.generic' is not supported" tells a reader nothing: most of a
model's ops are generics. This names the generic by its loops (element-wise, a reduction, a
window) and what its body computes, and the data-tiling ops by their role.
"""

from __future__ import annotations

from iree.compiler import ir

# Body ops that name what a window or reduction combines.
_COMBINERS = {
    "arith.maximumf": "max",
    "arith.maxnumf": "max",
    "arith.maxsi": "max",
    "arith.maxui": "max",
    "arith.minimumf": "min",
    "arith.minnumf": "min",
    "arith.minsi": "min",
    "arith.minui": "min",
    "arith.addf": "sum",
    "arith.addi": "sum",
}
_LAYOUT_OPS = {
    "linalg.pack": "a data-tiling layout change into the mmt4d tile layout",
    "linalg.unpack": "a data-tiling layout change back from the mmt4d tile layout",
    "linalg.transpose": "a transpose",
    "linalg.copy": "a copy",
    "tensor.pad": "a pad",
    # Under data tiling on the CPU: the root of some models' encoding dispatches (zfnet512's; its
    # region had no block), and the matmul under `--iree-llvmcpu-enable-inner-tiled` (no region).
    "iree_linalg_ext.map_store": "a data-tiling layout change written through an index map",
    "iree_codegen.inner_tiled": "a data-tiled matmul on the target's inner tiles",
}


def name_root_op(root_op: ir.Operation) -> str:
    """Name a root op: `'linalg.generic' (an element-wise op of 3 parallel loops)`,
    `'linalg.pack' (a data-tiling layout change into the mmt4d tile layout)`."""
    name = root_op.name
    if name in _LAYOUT_OPS:
        return f"'{name}' ({_LAYOUT_OPS[name]})"
    if "iterator_types" not in root_op.attributes:
        return f"'{name}'"
    try:
        iterators = [str(attr) for attr in ir.ArrayAttr(root_op.attributes["iterator_types"])]
    except ValueError:  # Not an array: an op of some other dialect that reuses the name.
        return f"'{name}'"
    parallel = sum("parallel" in iterator for iterator in iterators)
    reductions = len(iterators) - parallel
    body = _body_op_names(root_op)
    uses_index = "linalg.index" in body
    if reductions == 0:
        kind = "an element-wise op"
        if uses_index:
            kind = "an index-computing element-wise op"
        elif body == ["linalg.yield"]:
            kind = "a copy, transpose or broadcast"
        return f"'{name}' ({kind} of {_loops(parallel, 'parallel')})"
    combiner = next((_COMBINERS[op] for op in reversed(body) if op in _COMBINERS), None)
    results = len(root_op.results)
    what = f"a {combiner} reduction" if combiner else "a reduction"
    if results > 1:
        what = f"a {results}-result reduction (an arg-max or a fused pair, say)"
    return (
        f"'{name}' ({what} of {_loops(parallel, 'parallel')} and {_loops(reductions, 'reduction')})"
    )


def _body_op_names(root_op: ir.Operation) -> list[str]:
    """Name the ops of the root op's first block; none when it has no region
    (`iree_codegen.inner_tiled`) or its region no block (`iree_linalg_ext.map_store`)."""
    if not root_op.regions:
        return []
    blocks = list(root_op.regions[0].blocks)
    return [op.name for op in blocks[0].operations] if blocks else []


def _loops(count: int, kind: str) -> str:
    return f"{count} {kind} loop{'' if count == 1 else 's'}"
