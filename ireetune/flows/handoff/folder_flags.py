"""The global compiler flags a run folder may carry: exactly those ireetune's flag search writes.

`continue` passes a measured folder's global flags to iree-compile. A folder is untrusted data,
and a flag of plain form can still make the compiler write files
(`--iree-llvmcpu-keep-linker-artifacts` leaves object files in /tmp), so the folder format accepts
no flag outside the searched spaces;
the one option made for a model (the llvm-cpu channels-last windows transform spec) is
accepted when its file holds exactly what ireetune writes there. A flag the person gives
again on the command line of `continue` (`--flags`) is theirs, and accepted.

Runtime-only: the flag spaces are data, read without the compiler (`measure` checks a folder's
flags too).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.core.flag_space import FlagSpace, list_tuned_flags
from ireetune.targets.gpu.flags import CUDA_FLAG_SPACE, ROCM_FLAG_SPACE
from ireetune.targets.llvm_cpu.flags import CPU_FLAG_SPACE, MATERIALIZE_FIRST
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


_SPACES = (CPU_FLAG_SPACE, CUDA_FLAG_SPACE, ROCM_FLAG_SPACE)
# The llvm-cpu target adds MATERIALIZE_FIRST to every late data-tiled flag set itself.
FOLDER_FLAGS = frozenset().union(*(list_space_flags(space) for space in _SPACES)) | {
    MATERIALIZE_FIRST
}
# The runtime options the flag phase searches (`--task_topology_max_group_count=4`): a model
# run folder keeps the winner's, for the runtime.
FOLDER_RUNTIME_FLAGS = frozenset(
    f"{option.name}={value}"
    for space in _SPACES
    for option in space.runtime
    for value in (*option.values, option.default)
)


def check_folder_flags(
    flags: Sequence[str], origin: str, given: Sequence[str] = (), command: str = ""
) -> None:
    """Refuse a global flag that no flag search writes (`origin` names where it came from),
    unless the person gave it again on the command line (`given`, the `--flags` of `command`:
    what `continue` and `replay` take, named in the refusal)."""
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == TRANSFORM_SPEC_FLAG and is_generated_spec(Path(value)):
            continue
        if flag in FOLDER_FLAGS or flag in FOLDER_RUNTIME_FLAGS or flag in given:
            continue
        again = (
            f"; a run tuned with --flags {shlex.quote(flag)} continues with `ireetune {command} "
            f"RUN --flags {shlex.quote(flag)}`"
            if command
            else ""
        )
        raise IreetuneError(
            f"{origin}: {flag!r} is not a flag a run folder may carry (only the flag "
            f"search's options, see `ireetune/targets/*/flags.py`){again}"
        )
