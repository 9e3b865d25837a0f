"""Canonical names for the target and device parts of a database key."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def describe_target(target_name: str, executable_target: str) -> str:
    """Name a target with a short hash of its executable target (arch and CPU features)."""
    digest = hashlib.sha256(executable_target.encode()).hexdigest()[:12]
    return f"{target_name}#{digest}"


def describe_device(device_uri: str) -> str:
    """Name a runtime device; for the CPU add the processor model and the usable cores."""
    if not device_uri.startswith("local"):
        return device_uri
    model = "unknown cpu"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{device_uri} ({model}, {len(os.sched_getaffinity(0))} cores)"
