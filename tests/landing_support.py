"""What the "lands in a whole model" tests share: dump a model's dispatches, take the problem of
one family with its request (the dispatch's default read as knobs), and compile the whole model
with a spec for a candidate, checking the configuration dump (`ireetune compile`'s check)."""

from __future__ import annotations

from pathlib import Path

from iree.compiler import ir

from ireetune.core.candidate import Knobs
from ireetune.core.errors import IreetuneError
from ireetune.core.target import SpaceRequest, space_for
from ireetune.problem.family import Problem
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.apply import CompileReport, compile_with_spec, resolve_compile_target
from ireetune.spec.builder import build_configuration_spec
from ireetune.targets import parse_target
from tests.conftest import TEST_CPU, TEST_TARGET, dump_benchmarks


def find_family_requests(
    model_text: str, folder: Path, family: str, cpu: str = TEST_CPU, flags: tuple[str, ...] = ()
) -> list[SpaceRequest]:
    """Dump the model's dispatches for `cpu` under `flags`; return the requests of its problems
    of `family` (each problem, its executable target and the compiler's default as knobs)."""
    context = ir.Context()
    found = []
    for benchmark in dump_benchmarks(model_text, folder, cpu, flags):
        with context:
            # Kept in a name: the root op lives only as long as its module.
            module = ir.Module.parse(benchmark.read_text())
            root_op = find_root_op(module)
            try:
                problem = parse_problem(root_op)
            except IreetuneError:  # A dispatch no family tunes (a copy on buffers, say).
                continue
            if problem.family != family:
                continue
            space = space_for(parse_target(TEST_TARGET), problem)
            default = space.parse_default_knobs(problem, root_op)
            variant = root_op
            while variant.name != "hal.executable.variant":
                variant = variant.parent
            found.append(SpaceRequest(problem, variant.attributes["target"], default, 0))
    return found


def compile_model_with_candidate(
    model_path: Path, problem: Problem, knobs: Knobs, folder: Path, flags: tuple[str, ...] = ()
) -> CompileReport:
    """Compile the whole model (under `flags`) with a spec that gives the problem's op the
    candidate `knobs`."""
    target = parse_target(TEST_TARGET)
    context = ir.Context()
    configuration = space_for(target, problem).configuration(problem, knobs, context)
    spec = folder / "spec.mlir"
    spec.write_text(
        build_configuration_spec(problem, configuration, target.spec_prologue(problem), context)
    )
    compile_target = resolve_compile_target(TEST_TARGET, flags)
    return compile_with_spec(model_path, compile_target, spec, folder / "model.vmfb", 120)
