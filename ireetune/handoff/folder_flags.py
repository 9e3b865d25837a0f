"""The global compiler flags a run folder may carry: exactly those ireetune's flag search writes.

`finish` passes a folder's global flags to iree-compile. A folder is untrusted data, and a flag
of plain form can still make the compiler write files (`--iree-llvmcpu-keep-linker-artifacts`
leaves object files in /tmp), so the folder format accepts no flag outside the searched spaces;
the one option made for a model (the llvm-cpu channels-last windows transform spec) is
accepted when its file holds exactly what ireetune writes there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ireetune.core.flag_space import FlagSpace, list_tuned_flags
from ireetune.errors import IreetuneError
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE, ROCM_FLAG_SPACE
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE
from ireetune.targets.llvm_cpu.window_layout import TRANSFORM_SPEC_FLAG, is_generated_spec


def list_space_flags(space: FlagSpace) -> frozenset[str]:
    """Return every flag a flag space can propose (its options' choices, combinations and the
    values of its searched options)."""
    flags: set[str] = set()
    for option in space.options:
        flags.update(option.requires)
        for choice in option.choices:
            flags.update(choice)
    for combination in space.combinations:
        flags.update(combination)
    return frozenset(flags) | list_tuned_flags(space.tuned)


FOLDER_FLAGS = frozenset().union(
    *(list_space_flags(space) for space in (CPU_FLAG_SPACE, CUDA_FLAG_SPACE, ROCM_FLAG_SPACE))
)


def check_folder_flags(flags: Sequence[str], origin: str) -> None:
    """Refuse a global flag that no flag search writes (`origin` names where it came from)."""
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == TRANSFORM_SPEC_FLAG and is_generated_spec(Path(value)):
            continue
        if flag not in FOLDER_FLAGS:
            raise IreetuneError(
                f"{origin}: {flag!r} is not a flag a run folder may carry (only the flag "
                "search's options, see `ireetune/targets/*/flags.py`)"
            )
