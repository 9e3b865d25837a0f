"""Which Vulkan target `--target vulkan` (no name) means: the one the machine's device runs.

TODO(vkdevice): this is the seam for the device detection of issue 24 part 4. It reads the first
device `iree-run-module --dump_devices=vulkan` reports and maps its vendor to a target; a device
that reports nothing known, or a machine without a Vulkan device, gets ireetune's lavapipe
description. The real detection (limits from the device, a custom target derived from them)
replaces `detect_vulkan_target` and keeps its signature.
"""

from __future__ import annotations

import functools
import logging
import re

from ireetune.targets.vulkan.archs import LAVAPIPE
from ireetune.tools import find_tool, run_tool

logger = logging.getLogger(__name__)

# PCI vendor ids -> the IREE target of that vendor's usual current GPU.
VENDOR_TARGETS = {
    0x10005: LAVAPIPE,  # Mesa (lavapipe / llvmpipe, on the CPU)
    0x1002: "rdna3",  # AMD
    0x10DE: "ampere",  # NVIDIA
    0x13B5: "valhall4",  # ARM Mali
    0x5143: "adreno",  # Qualcomm
}
DUMP_TIMEOUT_S = 60.0


def vendor_target(dump_text: str) -> str:
    """Map the first device of an `iree-run-module --dump_devices=vulkan` report to a target."""
    match = re.search(r"^vendor_id:\s*0x([0-9a-fA-F]+)", dump_text, re.MULTILINE)
    if match is None:
        return LAVAPIPE
    return VENDOR_TARGETS.get(int(match.group(1), 16), LAVAPIPE)


@functools.cache
def detect_vulkan_target() -> str:
    """Return the name (after `vulkan:`) of the target for this machine's Vulkan device."""
    result = run_tool(
        [find_tool("iree-run-module"), "--dump_devices=vulkan"], timeout_s=DUMP_TIMEOUT_S
    )
    if result.timed_out or result.returncode != 0:
        logger.warning("no Vulkan device answered; compiling for ireetune's lavapipe target")
        return LAVAPIPE
    return vendor_target(result.stdout)
