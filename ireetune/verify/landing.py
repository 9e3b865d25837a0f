"""Prove that a spec's configuration reached the compiler: find it in the configuration dump."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from ireetune.compile.driver import (
    CONFIGURED_PHASE,
    DUMP_CONFIGURATIONS_FLAG,
    build_request,
    run_compile,
)
from ireetune.core.errors import IreetuneError
from ireetune.core.target import Target


def dump_configurations(
    target: Target, stripped_path: Path, spec_path: Path, work_dir: Path, timeout_s: float = 120.0
) -> str:
    """Compile to the configuration stage with the spec; return the dumped configurations' text."""
    work_dir.mkdir(parents=True, exist_ok=True)
    dump_dir = work_dir / "configuration_dump"
    configured = work_dir / "configured.mlir"
    result = run_compile(
        build_request(
            target, stripped_path, configured,
            phase_flags=("--compile-from=executable-sources", CONFIGURED_PHASE),
            spec_path=spec_path, dumps=((DUMP_CONFIGURATIONS_FLAG, dump_dir),), timeout_s=timeout_s,
        )
    )  # fmt: skip
    if dump_dir.exists() and any(dump_dir.iterdir()):
        return "\n".join(p.read_text() for p in sorted(dump_dir.iterdir()))
    if result.ok and configured.exists():
        return configured.read_text()
    return ""


def expected_lowering_config(compilation_info: str, context: ir.Context) -> str:
    """Return the lowering_config of a `#iree_codegen.compilation_info` as the compiler prints it."""
    with context:
        info = iree_codegen.CompilationInfoAttr(ir.Attribute.parse(compilation_info))
        return str(info.lowering_config)


def prove_config_landed(
    target: Target,
    stripped_path: Path,
    spec_path: Path,
    compilation_info: str,
    work_dir: Path,
    context: ir.Context,
    function_attributes: Sequence[tuple[str, str]] = (),
) -> None:
    """Raise unless the configuration dump shows the spec's lowering_config on the root op and
    each attribute it sets on the op's function (a CPU batch_mmt4d's codegen target) there."""
    dumped = dump_configurations(target, stripped_path, spec_path, work_dir)
    lowering = expected_lowering_config(compilation_info, context)
    if lowering not in dumped:
        raise IreetuneError(
            f"the winning spec's configuration did not land: {lowering} is not in the configuration dump"
        )
    with context:
        for name, value in function_attributes:
            if f"{name} = {ir.Attribute.parse(value)}" not in dumped:
                raise IreetuneError(
                    f"the winning spec's function attribute {name} did not land: its value is "
                    "not in the configuration dump"
                )
