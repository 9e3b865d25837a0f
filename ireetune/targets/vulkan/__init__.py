"""The Vulkan (SPIR-V) target: `--target vulkan[:NAME]`.

`archs.py` holds the target names IREE 3.13 knows and ireetune's lavapipe description;
`detect.py` the default target (the machine's device); `target.py` the target; `space.py`,
`matmul_space.py` and `conv_space.py` the z3 spaces of the SPIR-V pipelines; `config.py` the
configuration attributes; `facts.py` the limits candidates are checked against.
"""

from __future__ import annotations

from collections.abc import Sequence

from ireetune.targets.vulkan.archs import parse_vulkan_arch
from ireetune.targets.vulkan.target import VulkanTarget


def default_vulkan_target(pipelines: Sequence[str] = ()) -> VulkanTarget:
    """Return the target for this machine's Vulkan device (`--target vulkan`, no name)."""
    from ireetune.targets.vulkan.detect import detect_vulkan_target

    return VulkanTarget(detect_vulkan_target(), pipelines)


def make_vulkan_target(arch: str, pipelines: Sequence[str] = ()) -> VulkanTarget:
    """Build the target for `vulkan:NAME`, or the machine's default for a bare `vulkan`."""
    if not arch.strip():
        return default_vulkan_target(pipelines)
    return VulkanTarget(parse_vulkan_arch(arch), pipelines)


__all__ = ["VulkanTarget", "default_vulkan_target", "make_vulkan_target"]
