"""The Vulkan (SPIR-V) target: `--target vulkan[:NAME]`.

`archs.py` holds the target names IREE 3.13 knows and ireetune's lavapipe description;
`target.py` the target; `space.py` and `matmul_space.py` the z3 spaces of the SPIR-V
pipelines; `config.py` the configuration attributes; `facts.py` the limits candidates are
checked against; `device.py` what the machine's device reports.

Here: which target `--target vulkan` (no name) means, the one the machine's device runs.
`device.py` reads the device and chooses (docs/vulkan_measuring.md): the vendor's named IREE
target where it states the device's subgroup size, else a custom target from the device's own
limits. That choice becomes a `VulkanTarget`'s arch and limits: a named target by its name,
lavapipe as `lavapipe` with the limits it reports, any other device as `device`. A machine
without a Vulkan device (a compile host of a split run) gets ireetune's lavapipe description,
with a warning: name the device host's target there (`--target vulkan:ampere`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from ireetune.core.errors import IreetuneError
from ireetune.targets.vulkan.archs import LAVAPIPE, VulkanDeviceLimits, parse_vulkan_arch
from ireetune.targets.vulkan.device import VENDOR_MESA, VulkanTargetChoice, detect_target
from ireetune.targets.vulkan.target import VulkanTarget

logger = logging.getLogger(__name__)

# The arch of a custom target derived from a device that is not lavapipe (an Intel GPU, say);
# `vulkan:device` means the same: this machine's device, described from its limits.
DEVICE = "device"


@functools.cache
def detect_default_target() -> tuple[str, VulkanDeviceLimits | None]:
    """Return the arch (after `vulkan:`) and, for a custom target, the limits of the target for
    this machine's first Vulkan device."""
    try:
        choice = detect_target("vulkan")
    except IreetuneError as error:
        logger.warning("%s; compiling for ireetune's lavapipe target", error)
        return LAVAPIPE, None
    logger.info("--target vulkan: %s", choice.describe())
    return target_arch(choice)


def target_arch(choice: VulkanTargetChoice) -> tuple[str, VulkanDeviceLimits | None]:
    """Name a chosen target as `vulkan:NAME` does, with the limits of a custom one."""
    if choice.named_target is not None:
        return choice.named_target, None
    lavapipe = choice.device.vendor_id == VENDOR_MESA and choice.device.runs_on_cpu
    return (LAVAPIPE if lavapipe else DEVICE), choice.limits


def default_vulkan_target(pipelines: Sequence[str] = ()) -> VulkanTarget:
    """Return the target for this machine's Vulkan device (`--target vulkan`, no name)."""
    arch, limits = detect_default_target()
    return VulkanTarget(arch, pipelines, limits)


def make_vulkan_target(arch: str, pipelines: Sequence[str] = ()) -> VulkanTarget:
    """Build the target for `vulkan:NAME`, or the machine's default for a bare `vulkan` (and for
    `vulkan:device`, the name of a device described from its own limits)."""
    if arch.strip().lower() in ("", DEVICE):
        return default_vulkan_target(pipelines)
    return VulkanTarget(parse_vulkan_arch(arch), pipelines)


__all__ = ["VulkanTarget", "default_vulkan_target", "make_vulkan_target"]
