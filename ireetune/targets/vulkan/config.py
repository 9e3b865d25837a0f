"""SPIR-V configurations as IREE 3.13 writes them, rendered and read back.

A SPIR-V configuration is a `#iree_codegen.lowering_config` of tile-size levels on the root op and
a `translation_info` that names the pipeline, the workgroup size, optionally the subgroup size,
and the software-pipelining options of the pipelines that promote to shared memory:

    lowering_config = #iree_codegen.lowering_config<tile_sizes = [[64, 64, 16]]>
    translation_info = #iree_codegen.translation_info<pipeline =
        #iree_gpu.spirv_pipeline<MatmulPromoteVectorize> workgroup_size = [16, 8, 1],
        {pipeline_depth = 2 : i64, store_stage = 0 : i64}>

The levels differ by pipeline (KernelConfig.cpp): BaseVectorize has workgroup, thread and
reduction tiles (and a window level for convolutions); MatmulPromoteVectorize one level with the
K tile merged in; CooperativeMatrixVectorize workgroup, subgroup, reduction and matrix-shape
levels.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen


class SpirvPipeline(enum.Enum):
    """The SPIR-V codegen pipelines ireetune searches."""

    BASE = "BaseVectorize"
    PROMOTE = "MatmulPromoteVectorize"
    COOPERATIVE = "CooperativeMatrixVectorize"


PIPELINE_NAMES = tuple(pipeline.value for pipeline in SpirvPipeline)


@dataclass(frozen=True)
class SpirvConfig:
    """One configuration of a SPIR-V root op; `subgroup_size` 0 leaves it to the driver, and the
    pipelining options are set only where the pipeline needs them."""

    pipeline: SpirvPipeline
    tile_sizes: tuple[tuple[int, ...], ...]
    workgroup_size: tuple[int, int, int]
    subgroup_size: int = 0
    pipeline_depth: int | None = None
    store_stage: int | None = None

    def translation_text(self) -> str:
        """Write the `#iree_codegen.translation_info<...>` of the configuration."""
        wg = ", ".join(str(size) for size in self.workgroup_size)
        text = f"pipeline = #iree_gpu.spirv_pipeline<{self.pipeline.value}> workgroup_size = [{wg}]"
        if self.subgroup_size:
            text += f" subgroup_size = {self.subgroup_size}"
        if self.pipeline_depth is not None:
            text += (
                f", {{pipeline_depth = {self.pipeline_depth} : i64, "
                f"store_stage = {self.store_stage or 0} : i64}}"
            )
        return f"#iree_codegen.translation_info<{text}>"

    def lowering_text(self) -> str:
        """Write the `#iree_codegen.lowering_config<tile_sizes = ...>` of the configuration."""
        levels = ", ".join(
            "[" + ", ".join(str(v) for v in level) + "]" for level in self.tile_sizes
        )
        return f"#iree_codegen.lowering_config<tile_sizes = [{levels}]>"


def render_compilation_info(config: SpirvConfig, context: ir.Context) -> str:
    """Render a configuration as `#iree_codegen.compilation_info` text, checked by the parser."""
    with context:
        # The SPIR-V pipeline attribute has no Python builder in IREE 3.13; the attributes are
        # parsed from text and the compilation_info around them built through the bindings.
        lowering_config = ir.Attribute.parse(config.lowering_text())
        translation_info = ir.Attribute.parse(config.translation_text())
        return str(iree_codegen.CompilationInfoAttr.get(lowering_config, translation_info))


def _enclosing_function(op: ir.Operation) -> ir.Operation | None:
    current: ir.Operation | None = op
    while current is not None and current.name != "func.func":
        parent = current.parent
        current = parent.operation if parent is not None else None
    return current


def _search_int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else None


def read_spirv_config(root_op: ir.Operation) -> SpirvConfig | None:
    """Read the compiler's configuration of a root op (its lowering_config and its function's
    translation_info), or None when it has none or names another pipeline."""
    if "lowering_config" not in root_op.attributes:
        return None
    function = _enclosing_function(root_op)
    if function is None or "translation_info" not in function.attributes:
        return None
    lowering = str(root_op.attributes["lowering_config"])
    translation = str(function.attributes["translation_info"])
    tiles = re.search(r"tile_sizes = (\[\[[-0-9, \[\]]*\]\])", lowering)
    pipeline = re.search(r"spirv_pipeline<(\w+)>", translation)
    workgroup = re.search(r"workgroup_size = \[([0-9, ]+)\]", translation)
    if tiles is None or pipeline is None or workgroup is None:
        return None
    if pipeline.group(1) not in PIPELINE_NAMES:
        return None
    sizes = [int(v) for v in workgroup.group(1).split(",")]
    sizes += [1] * (3 - len(sizes))
    return SpirvConfig(
        pipeline=SpirvPipeline(pipeline.group(1)),
        tile_sizes=tuple(tuple(level) for level in ast.literal_eval(tiles.group(1))),
        workgroup_size=(sizes[0], sizes[1], sizes[2]),
        subgroup_size=_search_int(r"subgroup_size = (\d+)", translation) or 0,
        pipeline_depth=_search_int(r"pipeline_depth = (\d+)", translation),
        store_stage=_search_int(r"store_stage = (\d+)", translation),
    )
