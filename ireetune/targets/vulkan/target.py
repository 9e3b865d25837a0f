"""The Vulkan (SPIR-V) target: IREE's named Vulkan targets and ireetune's lavapipe description.

Specs are applied with `--iree-codegen-transform-dialect-library`: IREE 3.13's SPIR-V pipeline
ignores `--iree-codegen-tuning-spec-path` (the binary is byte-identical to the default's), while
the transform-dialect library, whose default entry point is `__kernel_config` (the entry point of
every tuning spec), lands. The spec written for the user is still a standard tuning spec
(docs/vulkan.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ireetune.core.errors import IreetuneError
from ireetune.core.target import SpaceFactory, Target, TargetTraits
from ireetune.targets.vulkan.archs import CUSTOM_TARGETS, VulkanDeviceLimits, render_device_target
from ireetune.targets.vulkan.config import PIPELINE_NAMES, SpirvPipeline
from ireetune.targets.vulkan.space import VulkanContractionSpace, VulkanConvolutionSpace

TRANSFORM_LIBRARY_FLAG = "--iree-codegen-transform-dialect-library"


class VulkanTarget(Target):
    """`vulkan:NAME`: compiled for one of IREE's Vulkan targets, or for a device ireetune
    describes itself (`limits`: lavapipe, or one the device detection derives), run on the
    `vulkan` device."""

    def __init__(
        self, arch: str, pipelines: Sequence[str] = (), limits: VulkanDeviceLimits | None = None
    ) -> None:
        for pipeline in pipelines:
            if pipeline not in PIPELINE_NAMES:
                raise IreetuneError(
                    f"unknown pipeline '{pipeline}' for vulkan; choose from {', '.join(PIPELINE_NAMES)}"
                )
        self.arch = arch
        # A custom device description replaces `--iree-vulkan-target` (lavapipe's by name).
        self.limits = limits or CUSTOM_TARGETS.get(arch)
        self.pipelines = tuple(SpirvPipeline(name) for name in pipelines) or tuple(SpirvPipeline)

    @property
    def name(self) -> str:
        return f"vulkan:{self.arch}"

    backend = "vulkan-spirv"
    runtime_device = "vulkan"

    def target_flags(self) -> list[str]:
        if self.limits is not None:
            # The whole device description in place of `vulkan` (no --iree-vulkan-target).
            return [f"--iree-hal-target-device={render_device_target(self.limits)}"]
        return ["--iree-hal-target-device=vulkan", f"--iree-vulkan-target={self.arch}"]

    traits = TargetTraits(
        spec_flag=TRANSFORM_LIBRARY_FLAG,
        # A configuration is its knobs spread over the op's loops; no limit is needed to render.
        renders_without_dispatch=True,
    )

    def family_spaces(self) -> Mapping[str, SpaceFactory]:
        return {
            "contraction": lambda _: VulkanContractionSpace(self.pipelines),
            "batch_contraction": lambda _: VulkanContractionSpace(self.pipelines),
            "convolution": lambda _: VulkanConvolutionSpace(self.pipelines),
        }

    def unsupported_families(self) -> Mapping[str, str]:
        return {
            "attention": "IREE 3.13 has no SPIR-V attention pipeline to configure",
            "reduction": (
                "the SPIR-V SubgroupReduce space is not written yet (and IREE's named targets "
                "give wrong reductions on devices of another subgroup size)"
            ),
            "elementwise": (
                "element-wise ops are not tuned on Vulkan: they are bound by memory bandwidth, "
                "and the SPIR-V spaces are written for contractions and convolutions only"
            ),
            "pack": "data-tiling packs are tuned on the CPU only",
            "unpack": "data-tiling unpacks are tuned on the CPU only",
            "buffer_copy": "copies on buffers (a pad's copy into its padded buffer) are tuned on the CPU only",
            "inner_tiled": (
                "data-tiled matmuls on inner tiles (iree_codegen.inner_tiled) are tuned on the CPU "
                "only"
            ),
        }
