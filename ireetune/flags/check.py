"""Read global compiler flags a user writes (`--flags "..."`, a flags file) and check them.

A flag is checked twice: by form here (each one an `--option[=value]` with no whitespace, and
none of the flags ireetune sets itself), then by the compiler, which parses them on an empty
module: an unknown option or a bad value fails there in well under a second, with the
compiler's own message.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ireetune.compile.driver import CompileRequest, CompileStatus, run_compile
from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target

# Flags that ireetune sets on every compile (target selection, specs, dumps, phases, output):
# a user's copy would fight ours.
RESERVED_PREFIXES = (
    "--iree-hal-target-device",
    "--iree-hal-target-backends",
    "--iree-hal-local-target-device-backends",
    "--iree-llvmcpu-target-cpu",
    "--iree-cuda-target",
    "--iree-rocm-target",
    "--iree-codegen-tuning-spec-path",
    "--iree-codegen-transform-dialect-library",
    "--iree-codegen-enable-default-tuning-specs",
    "--iree-codegen-add-tuner-attributes",
    "--iree-hal-dump-",
    "--compile-to",
    "--compile-from",
    "--output-format",
    "-o",
)
CHECK_TIMEOUT_S = 60.0


def parse_flag_text(text: str, option: str = "--flags") -> tuple[str, ...]:
    """Split the text of `option` (`--flags`, `--try-flags`; shell-style quoting) into flags
    and check their form."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise IreetuneError(f"{option}: cannot split {text!r}: {error}") from error
    return check_flag_form(words, option)


def check_flag_form(flags: Sequence[str], origin: str) -> tuple[str, ...]:
    """Return the flags unchanged if each is one `--option[=value]` that ireetune does not own."""
    for flag in flags:
        if not flag.startswith("--") or len(flag) == 2:
            raise IreetuneError(
                f"{origin}: {flag!r} is not an iree-compile option (--name[=value])"
            )
        if any(character.isspace() for character in flag):
            raise IreetuneError(f"{origin}: {flag!r} contains whitespace")
        name = flag.split("=", 1)[0]
        if any(name == prefix or name.startswith(prefix) for prefix in RESERVED_PREFIXES):
            raise IreetuneError(
                f"{origin}: {name} is set by ireetune itself (target, spec, dumps or phases)"
            )
    return tuple(flags)


def check_flags_with_compiler(flags: Sequence[str], target: Target, origin: str) -> None:
    """Have iree-compile parse the flags (with the target's) on an empty module; raise if not."""
    if not flags:
        return
    with tempfile.TemporaryDirectory(prefix="ireetune_flags_") as folder:
        source = Path(folder) / "empty.mlir"
        source.write_text("module {}\n")
        result = run_compile(
            CompileRequest(
                source, Path(folder) / "out.mlir", target_flags=tuple(target.target_flags()),
                phase_flags=(*flags, "--compile-to=input"), timeout_s=CHECK_TIMEOUT_S,
            )
        )  # fmt: skip
    if result.status is CompileStatus.TIMED_OUT:
        raise IreetuneError(f"{origin}: iree-compile did not finish checking the flags")
    if not result.ok:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        reason = lines[0].split("  Try:")[0] if lines else f"exit status {result.returncode}"
        raise IreetuneError(f"{origin}: iree-compile rejects the flags: {reason[:300]}")
