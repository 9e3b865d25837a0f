"""What the CPU search space needs to know about the machine that will run the code."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.core.features import FactValue

_DEFAULT_L1_BYTES = 32 * 1024
_DEFAULT_L2_BYTES = 1024 * 1024


@dataclass(frozen=True)
class CpuFacts:
    """Vector width, register file and caches of the CPU a dispatch is compiled for."""

    cpu: str
    native_vector_bytes: int
    vector_registers: int
    l1_bytes: int
    l2_bytes: int
    threads: int
    max_vector_bytes: int = 32768


def thread_imbalance(tiles: int, threads: int) -> float:
    """How much of the last round of tiles is idle, as a share of a round: `tiles` tasks on
    `threads` threads take ceil(tiles / threads) rounds (0 when every thread is busy to the end)."""
    return math.ceil(tiles / threads) * threads / tiles - 1.0


def _read_cache_bytes(level: int) -> int | None:
    """Read the host's data-cache size of `level` from sysfs (Linux), or None."""
    cache_root = Path("/sys/devices/system/cpu/cpu0/cache")
    if not cache_root.is_dir():
        return None
    for index in sorted(cache_root.glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            size_text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KM]?)", size_text)
        if match:
            scale = {"": 1, "K": 1024, "M": 1024 * 1024}[match.group(2)]
            return int(match.group(1)) * scale
    return None


def read_cpu_facts(variant_target: ir.Attribute | None, threads: int) -> CpuFacts:
    """Derive CpuFacts from a `#hal.executable.target<"llvm-cpu", ...>` attribute.

    The vector width and register file come from the target's own `native_vector_size` and
    `cpu_features`; cache sizes come from the host when it is the target, else typical values.
    """
    text = str(variant_target) if variant_target is not None else ""
    vector_match = re.search(r"native_vector_size = (\d+)", text)
    native_vector_bytes = int(vector_match.group(1)) if vector_match else 16
    cpu_match = re.search(r'cpu = "([^"]*)"', text)
    features_match = re.search(r'cpu_features = "([^"]*)"', text)
    features = set(features_match.group(1).split(",")) if features_match else set()
    stack_match = re.search(r"max_stack_allocation_size = (\d+)", text)
    is_aarch64 = "aarch64" in text or "arm64" in text
    vector_registers = 32 if ("+avx512f" in features or is_aarch64) else 16
    return CpuFacts(
        cpu=cpu_match.group(1) if cpu_match else "generic",
        native_vector_bytes=native_vector_bytes,
        vector_registers=vector_registers,
        l1_bytes=_read_cache_bytes(1) or _DEFAULT_L1_BYTES,
        l2_bytes=_read_cache_bytes(2) or _DEFAULT_L2_BYTES,
        threads=max(1, threads),
        max_vector_bytes=int(stack_match.group(1)) if stack_match else 32768,
    )


def cpu_facts_from_record(facts: Mapping[str, FactValue]) -> CpuFacts:
    """Read recorded machine facts (`dataclasses.asdict` of CpuFacts) back; raise an
    IreetuneError for facts that are not a CPU's."""
    names = {field.name: field.type for field in dataclasses.fields(CpuFacts)}
    if set(facts) - set(names) or not {"cpu", "native_vector_bytes"} <= set(facts):
        raise IreetuneError(f"not the facts of a CPU: {sorted(facts)}")
    values: dict[str, int | str] = {}
    for name, value in facts.items():
        wanted = str if name == "cpu" else int
        if not isinstance(value, wanted) or isinstance(value, bool):
            raise IreetuneError(f"CPU fact {name} must be {wanted.__name__}, got {value!r:.40}")
        values[name] = value
    return CpuFacts(**values)  # type: ignore[arg-type]
