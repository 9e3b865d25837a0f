"""The Vulkan targets IREE 3.13 knows, and ireetune's own targets for devices it does not.

`--iree-vulkan-target=NAME` picks one of IREE's target descriptions (its limits, subgroup sizes
and cooperative matrices). The names below are those the pinned iree-compile accepted and
resolved to a non-empty arch (checked 2026-11-25; `cdna3`, `gfx1010`, `gfx1030` and `gfx1102` are
accepted but resolve to arch "" and are left out). No IREE target has lavapipe's subgroup size 8,
and reductions compiled for another size give wrong results there (docs/vulkan_research.md), so
ireetune also describes lavapipe itself: a whole `#hal.device.target<...>` given to
`--iree-hal-target-device`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ireetune.core.errors import IreetuneError

# By vendor, in the order the error message lists them.
_ARM = (
    "valhall valhall1 valhall2 valhall3 valhall4 mali-g57 mali-g77 mali-g78 mali-g310 mali-g510 "
    "mali-g615 mali-g710 mali-g715"
)
_QUALCOMM = "adreno adreno-640 adreno-650 adreno-660 adreno-730 adreno-740 adreno-750 adreno-830"
_AMD = (
    "rdna1 rdna2 rdna3 rdna4 gfx1100 gfx1101 gfx1150 gfx1200 gfx1201 rx7900xtx w7900 gfx90a "
    "cdna2 gfx942 mi300x mi300a"
)
_NVIDIA = (
    "pascal volta turing ampere ada sm_60 sm_61 sm_70 sm_75 sm_80 sm_86 sm_87 sm_89 sm_120 a100 "
    "rtx3090 rtx4090"
)
_GENERIC = "vp_android_baseline_2022"
IREE_VULKAN_TARGETS: tuple[str, ...] = tuple(
    " ".join((_ARM, _QUALCOMM, _AMD, _NVIDIA, _GENERIC)).split()
)
# ireetune's description of Mesa's lavapipe (Vulkan on the CPU), from its `vulkaninfo`.
LAVAPIPE = "lavapipe"


@dataclass(frozen=True)
class VulkanDeviceLimits:
    """What a custom `#hal.device.target` states about a device: its subgroup sizes, workgroup
    limits, shared memory and the element types it computes and stores."""

    subgroup_sizes: tuple[int, ...]
    max_workgroup_sizes: tuple[int, int, int]
    max_threads: int
    max_workgroup_memory_bytes: int
    compute: str = "fp32|fp16|int32|int16|int8"
    storage: str = "b64|b32|b16|b8"
    subgroup_operations: str = "shuffle|arithmetic"
    # The SPIR-V version the device's Vulkan version guarantees (1.3: v1.6, 1.1: v1.3).
    spirv_version: str = "v1.6"
    max_workgroup_counts: tuple[int, int, int] = (65535, 65535, 65535)


# Mesa 22.3.6 lavapipe (vulkaninfo): subgroup size 8 (min = max = 8), 1024 invocations,
# 1024 per dimension, 32 KiB of shared memory, no cooperative matrix.
LAVAPIPE_LIMITS = VulkanDeviceLimits(
    subgroup_sizes=(8,),
    max_workgroup_sizes=(1024, 1024, 1024),
    max_threads=1024,
    max_workgroup_memory_bytes=32768,
)
CUSTOM_TARGETS = {LAVAPIPE: LAVAPIPE_LIMITS}


def render_device_target(limits: VulkanDeviceLimits) -> str:
    """Write the `#hal.device.target<"vulkan", ...>` that describes a device to iree-compile.

    It is given whole to `--iree-hal-target-device=`, in place of `vulkan`.
    """
    sizes = ", ".join(str(size) for size in limits.subgroup_sizes)
    wg = ", ".join(str(size) for size in limits.max_workgroup_sizes)
    wgp = (
        f"compute = {limits.compute}, storage = {limits.storage}, "
        f"subgroup = {limits.subgroup_operations}, dot = none, subgroup_size_choices = [{sizes}], "
        f"max_workgroup_sizes = [{wg}], max_thread_count_per_workgroup = {limits.max_threads}, "
        f"max_workgroup_memory_bytes = {limits.max_workgroup_memory_bytes}, "
        f"max_workgroup_counts = [{', '.join(str(count) for count in limits.max_workgroup_counts)}]"
    )
    features = f"spirv:{limits.spirv_version},cap:Shader"
    target_info = f'#iree_gpu.target<arch = "", features = "{features}", wgp = <{wgp}>>'
    executable = (
        f'#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
        f"{{iree_codegen.target_info = {target_info}}}>"
    )
    return f'#hal.device.target<"vulkan", [{executable}]>'


def parse_vulkan_arch(text: str) -> str:
    """Return the Vulkan target a `vulkan:NAME` names (IREE's or `lavapipe`), or explain why not."""
    name = text.strip().lower()
    if name in IREE_VULKAN_TARGETS or name in CUSTOM_TARGETS:
        return name
    known = ", ".join((*IREE_VULKAN_TARGETS, *CUSTOM_TARGETS))
    raise IreetuneError(f"unknown Vulkan target '{text.strip()}'; IREE 3.13 knows: {known}")
