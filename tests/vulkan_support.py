"""Shared by the Vulkan tests: the machine's Vulkan device (Mesa's lavapipe in CI) and compiles
for it with the target ireetune chooses for that device."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.targets.vulkan.device import VulkanTargetChoice, detect_target

IREE_COMPILE = str(Path(sys.executable).parent / "iree-compile")


@functools.cache
def vulkan_target() -> VulkanTargetChoice | None:
    """Return the target chosen for this machine's Vulkan device (None: no device)."""
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "iree-run-module"), "--list_devices"],
        capture_output=True,
        text=True,
        check=False,
    )
    if "vulkan://" not in listed.stdout:
        return None
    return detect_target("vulkan")


# CI sets IREETUNE_REQUIRE_VULKAN once it installed lavapipe: then a missing device fails.
requires_vulkan = pytest.mark.skipif(
    vulkan_target() is None and not os.environ.get("IREETUNE_REQUIRE_VULKAN"),
    reason="no Vulkan device (.ci/run installs Mesa's lavapipe: mesa-vulkan-drivers libvulkan1)",
)


def compile_for_vulkan(source: Path, output: Path, *extra: str) -> Path:
    """Compile `source` for the machine's Vulkan device (with the chosen target)."""
    target = vulkan_target()
    assert target is not None
    subprocess.run(
        [IREE_COMPILE, str(source), *target.compile_flags(), *extra, "-o", str(output)],
        check=True,
        capture_output=True,
    )
    return output
