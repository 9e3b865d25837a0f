"""Apply a spec to a model the right way for its target, and show what the compiler used.

How a spec reaches the compiler depends on the target (see REFERENCE.md): llvm-cpu and ROCm read
`--iree-codegen-tuning-spec-path`, CUDA silently ignores that flag and needs
`--iree-codegen-transform-dialect-library`. Only ROCm ships default specs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import (
    CONFIGURED_PHASE,
    DUMP_CONFIGURATIONS_FLAG,
    DUMP_SOURCES_FLAG,
    DUMP_SPECS_FLAG,
    CompileResult,
    CompileStatus,
    build_request,
    run_compile,
)
from ireetune.core.errors import IreetuneError
from ireetune.core.input_files import check_mlir_input
from ireetune.core.output_paths import output_in_place, replace_output
from ireetune.core.target import Target, links_specs
from ireetune.core.tools import SPEC_SAFETY_FLAGS
from ireetune.targets import parse_target


@dataclass(frozen=True)
class CompileTarget:
    """What compiling with a spec needs to know about a target."""

    name: str
    compile_flags: tuple[str, ...]
    spec_flag: str
    links_specs: bool
    has_default_specs: bool
    # The target itself, with the global flags: compile requests are built from it
    # (`compile.driver.build_request`).
    target: Target

    def spec_flags(self, spec_path: Path) -> list[str]:
        """Return the flags that make iree-compile apply the spec at `spec_path`."""
        return [f"{self.spec_flag}={spec_path}", *SPEC_SAFETY_FLAGS]


def resolve_compile_target(text: str, global_flags: Sequence[str] = ()) -> CompileTarget:
    """Turn a `--target` value (`cpu`, `cuda:sm_80`, `rocm:gfx942`) into a CompileTarget.

    The flags come from the target itself, then `global_flags` (a tuned flags file); how a spec
    is applied, whether the compiler links it and whether IREE ships default specs, the target
    says (CUDA applies specs as a transform-dialect library, which links nothing; REFERENCE.md).
    """
    target = parse_target(text).with_global_flags(global_flags)
    return CompileTarget(
        name=target.name,
        compile_flags=tuple(target.compile_flags()),
        spec_flag=target.traits.spec_flag,
        links_specs=links_specs(target),
        has_default_specs=target.traits.has_default_specs,
        target=target,
    )


@dataclass(frozen=True)
class DumpedSpec:
    """The spec text the compiler used for a model, and where it came from."""

    text: str
    note: str


def dump_used_spec(
    model_path: Path,
    target: CompileTarget,
    spec_path: Path | None,
    with_default_specs: bool,
    timeout_s: float,
) -> DumpedSpec:
    """Return the final linked spec the compiler uses for a model, as it dumps it.

    The dump comes from `--iree-codegen-dump-tuning-specs-to`.

    The compiler links the user's spec first and its default specs after, so user matchers win.
    On CUDA the spec is a transform-dialect library that the compiler runs as given: no linking
    happens and nothing is dumped, so the spec itself is returned.
    """
    from ireetune.spec.source import read_spec

    check_mlir_input(model_path, "model")
    if with_default_specs and not target.has_default_specs:
        raise IreetuneError(f"IREE ships no default tuning specs for {target.name} (only for ROCm)")
    if spec_path is None and not with_default_specs:
        raise IreetuneError("nothing to dump: give --spec SPEC and/or --with-default-specs")
    if spec_path is not None:
        # The spec is parsed here: the compiler's own message would name the model.
        read_spec(spec_path, ir.Context())
    with tempfile.TemporaryDirectory(prefix="ireetune_dump_") as folder:
        dump_dir = Path(folder) / "specs"
        result = run_compile(
            build_request(
                target.target,
                model_path,
                Path(folder) / "configured.mlir",
                phase_flags=(CONFIGURED_PHASE,),
                spec_path=spec_path,
                default_specs=with_default_specs,
                dumps=((DUMP_SPECS_FLAG, dump_dir),),
                timeout_s=timeout_s,
            )
        )
        _raise_unless_compiled(result, model_path, timeout_s)
        dumped = sorted(dump_dir.glob("*.mlir")) if dump_dir.is_dir() else []
        texts = [path.read_text() for path in dumped]
    if not target.links_specs:
        assert spec_path is not None
        note = (
            f"{target.name} applies the spec as a transform-dialect library ({target.spec_flag}); "
            "the compiler links nothing, so this is the spec as given."
        )
        return DumpedSpec(spec_path.read_text(), note=note)
    if not texts:
        raise IreetuneError(
            f"the compiler used no tuning spec for {model_path} on {target.name} "
            "(no dispatch to configure?)"
        )
    # One linked spec is dumped per compilation; several would come from several executables.
    return DumpedSpec("\n".join(texts), note="")


@dataclass(frozen=True)
class LandingCheck:
    """Whether the configuration a matcher should apply to a dispatch is the one compiled."""

    dispatch: str
    matcher: str
    expected: str
    found: str

    @property
    def landed(self) -> bool:
        return self.expected == self.found


@dataclass(frozen=True)
class CompileReport:
    """What `ireetune compile` compiled and whether the spec's configurations landed."""

    output_path: Path
    checks: tuple[LandingCheck, ...]
    notes: tuple[str, ...]

    @property
    def landed(self) -> bool:
        return bool(self.checks) and all(check.landed for check in self.checks)


def compile_with_spec(
    model_path: Path, target: CompileTarget, spec_path: Path, output_path: Path, timeout_s: float
) -> CompileReport:
    """Compile a model with a spec and check every predicted hit against the configuration dump.

    For each dispatch the static comparison says a matcher configures, the root op's
    `lowering_config` in `--iree-hal-dump-executable-configurations-to` must equal the matcher's,
    and so must each attribute the matcher's action sets on the op's function.
    A matcher's action may rewrite the op it configured (a CPU strided contraction becomes a
    strided slice and a contraction); such an op is compared, in the matchers' eyes, as the
    executable sources show it (`--iree-hal-dump-executable-sources-to`), before the spec ran.
    The `.vmfb` is written to `output_path` only when every configuration landed.
    """
    from ireetune.problem.root_op import parse_problem
    from ireetune.spec.inspect import DispatchRoot, compute_coverage, list_matchers
    from ireetune.spec.source import read_spec

    check_mlir_input(model_path, "model")
    context = ir.Context()
    matchers = list_matchers(read_spec(spec_path, context))
    with tempfile.TemporaryDirectory(prefix="ireetune_compile_") as folder:
        config_dir = Path(folder) / "configurations"
        sources_dir = Path(folder) / "sources"
        vmfb_path = Path(folder) / "model.vmfb"
        dumps = ((DUMP_CONFIGURATIONS_FLAG, config_dir), (DUMP_SOURCES_FLAG, sources_dir))
        # The binary written is compiled without the dumps, as `iree-compile` with the same
        # flags and spec builds it: a dumped build runs slower (compile/driver.binary_inputs).
        # The check stops once the executables are configured (its dumps are then complete),
        # beside the binary's compile.
        requests = [
            build_request(target.target, model_path, Path(folder) / "checked.mlir",
                          phase_flags=(CONFIGURED_PHASE,), spec_path=spec_path, dumps=dumps,
                          timeout_s=timeout_s),
            build_request(target.target, model_path, vmfb_path, spec_path=spec_path,
                          timeout_s=timeout_s),
        ]  # fmt: skip
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(run_compile, requests))
        for result in results:
            _raise_unless_compiled(result, model_path, timeout_s)
        checks: list[LandingCheck] = []
        notes: list[str] = []
        for index, config_path in enumerate(sorted(config_dir.glob("*.mlir"))):
            name = config_path.stem.removeprefix("configured_").removeprefix("module_")
            with context:
                module = ir.Module.parse(config_path.read_text())
                configured = _structured_ops(module)
                sources_path = sources_dir / f"{config_path.stem.removeprefix('configured_')}.mlir"
                # Kept in a name: the ops below live only as long as their module.
                sources_module = (
                    ir.Module.parse(sources_path.read_text()) if sources_path.is_file() else None
                )
                sources = _structured_ops(sources_module) if sources_module is not None else []
            if [op.name for op in sources] != [op.name for op in configured]:
                sources = []
            for position, root_op in enumerate(configured):
                if "lowering_config" not in root_op.attributes:
                    continue
                seen_as = [root_op, *sources[position : position + 1]]
                for candidate_op in seen_as:
                    try:
                        problem = parse_problem(candidate_op)
                    except IreetuneError:
                        continue
                    dispatch = DispatchRoot(index, name, candidate_op.name, problem)
                    (coverage,) = compute_coverage(matchers, [dispatch])
                    if coverage.winner is not None or coverage.undecided:
                        break
                else:
                    continue
                if coverage.undecided:
                    undecided = ", ".join(f"@{m.name}" for m in coverage.undecided)
                    notes.append(f"{name}: not checked, {undecided} cannot be evaluated statically")
                if coverage.winner is None or coverage.winner.lowering_config is None:
                    continue
                expected = [coverage.winner.lowering_config]
                found = [str(root_op.attributes["lowering_config"])]
                attributes = coverage.winner.function_attributes
                function = _function_of(root_op) if attributes else None
                for attribute, value in attributes:
                    held = function.attributes.get(attribute, None) if function else None
                    expected.append(f"its function's {attribute} = {value}")
                    found.append(f"its function's {attribute} = {held}")
                checks.append(
                    LandingCheck(name, coverage.winner.name, "; ".join(expected), "; ".join(found))
                )
        report = CompileReport(output_path, tuple(checks), tuple(notes))
        if report.landed:
            output_path.parent.mkdir(parents=True, exist_ok=True)
            replace_output(output_path, vmfb_path)
    return report


def compile_without_spec(
    model_path: Path, target: CompileTarget, output_path: Path, timeout_s: float
) -> None:
    """Compile a model with the target's flags (and its global flags) only."""
    check_mlir_input(model_path, "model")
    output_path.parent.mkdir(parents=True, exist_ok=True)
    # The compiler writes beside the output; the output changes only once it succeeded.
    with output_in_place(output_path) as vmfb_path:
        result = run_compile(
            build_request(target.target, model_path, vmfb_path, timeout_s=timeout_s)
        )
        _raise_unless_compiled(result, model_path, timeout_s)


def _raise_unless_compiled(result: CompileResult, model_path: Path, timeout_s: float) -> None:
    if result.status is CompileStatus.TIMED_OUT:
        raise IreetuneError(f"iree-compile took over {timeout_s:.0f} s on {model_path}")
    if not result.ok:
        raise IreetuneError(f"iree-compile failed on {model_path}: {result.error_line}")


def count_landed_matchers(spec_path: Path, configurations: Path) -> tuple[int, int]:
    """Return how many of the spec's matchers that set a `lowering_config` find it on an op of
    some dispatch in a configuration dump (`--iree-hal-dump-executable-configurations-to`), and
    how many set one: the spec's reach under the flags the dump was compiled with (another
    fusion or data tiling can leave a matcher nothing to configure)."""
    from ireetune.spec.inspect import list_matchers
    from ireetune.spec.source import read_spec

    context = ir.Context()
    configs = [m.lowering_config for m in list_matchers(read_spec(spec_path, context))]
    found: set[str] = set()
    for path in sorted(configurations.glob("*.mlir")):
        with context:
            module = ir.Module.parse(path.read_text())
            ops = _structured_ops(module)
            found.update(str(op.attributes["lowering_config"]) for op in ops
                         if "lowering_config" in op.attributes)  # fmt: skip
    expected = [config for config in configs if config is not None]
    return sum(1 for config in expected if config in found), len(expected)


def _function_of(op: ir.Operation) -> ir.Operation | None:
    """Return the `func.func` an op of a dispatch lives in (None: in none)."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return parent


def _structured_ops(module: ir.Module) -> list[ir.Operation]:
    """Return the dispatch's structured ops (linalg and IREE's linalg extensions) and any op
    that carries a `lowering_config`, in walk order (the configuration dump has no root_op
    mark); the terminators and index ops their regions hold are left out."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        structured = op.name.startswith(("linalg.", "iree_linalg_ext.")) and not op.name.endswith(
            (".yield", ".index")
        )
        if structured or "lowering_config" in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def render_compile_report(report: CompileReport) -> str:
    """Render one line per checked dispatch and the notes."""
    lines = []
    for check in report.checks:
        if check.landed:
            lines.append(f"landed: @{check.matcher} configured {check.dispatch}")
        else:
            lines.append(
                f"NOT LANDED: @{check.matcher} should configure {check.dispatch} with "
                f"{check.expected} but the compiler used {check.found}"
            )
    lines.extend(f"note: {note}" for note in report.notes)
    if report.landed:
        lines.append(f"wrote {report.output_path}")
    return "\n".join(lines) + "\n"
