"""Files a compile's flags name, for a compile that runs on another node.

A flag set of the model flag phase can name a file the compiler reads (the llvm-cpu channels-last
windows transform spec, `--iree-preprocessing-transform-spec-filename=PATH`). A node of a
Ray cluster may not have that path: the file is read where the request is made, travels with
the compile, and is written beside it on the node, the flag naming the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ireetune.compile.driver import CompileRequest

FILE_VALUED_FLAGS = frozenset({"--iree-preprocessing-transform-spec-filename"})

# (the path as the flag names it, the file's content)
FlagFiles = tuple[tuple[str, bytes], ...]


def read_flag_files(request: CompileRequest) -> FlagFiles:
    """Return each file a flag of the request names, once (a file that cannot be read is left
    out: the compile then reports it missing)."""
    files: dict[str, bytes] = {}
    for flag in (*request.target_flags, *request.phase_flags):
        name, has_value, value = flag.partition("=")
        if has_value and name in FILE_VALUED_FLAGS and value not in files:
            try:
                files[value] = Path(value).read_bytes()
            except OSError:
                continue
    return tuple(files.items())


def place_flag_files(
    request: CompileRequest, files: FlagFiles, folder: Path
) -> tuple[CompileRequest, dict[str, str]]:
    """Write `files` under `folder`; return the request with its flags naming the copies, and
    each copy's path mapped to the original (to name the original in what the user reads)."""
    copies: dict[str, str] = {}
    for index, (original, content) in enumerate(files):
        copy = folder / f"flag_file_{index}" / Path(original).name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(content)
        copies[original] = str(copy)

    def rewrite(flags: Sequence[str]) -> tuple[str, ...]:
        rewritten = []
        for flag in flags:
            name, has_value, value = flag.partition("=")
            moved = has_value and name in FILE_VALUED_FLAGS and value in copies
            rewritten.append(f"{name}={copies[value]}" if moved else flag)
        return tuple(rewritten)

    placed = replace(
        request,
        target_flags=rewrite(request.target_flags),
        phase_flags=rewrite(request.phase_flags),
    )
    return placed, {copy: original for original, copy in copies.items()}
