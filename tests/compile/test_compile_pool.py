"""The compile pool with the real iree-compile: landing, failures, timeouts, hashing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from iree.compiler import ir

from ireetune.compile.driver import CompileStatus, build_request
from ireetune.compile.pool import CompileBatch, CompileJob, compile_one
from ireetune.core.candidate import make_knobs
from ireetune.core.target import space_for
from ireetune.core.tools import find_tool
from ireetune.executor import LocalExecutor
from ireetune.flows.dispatch.stages import BASELINE_SPEC_TEXT
from ireetune.frontend.dispatches import strip_configurations
from ireetune.problem.root_op import find_root_op, parse_problem
from ireetune.spec.builder import MatcherEntry, build_spec, render_spec
from ireetune.targets import parse_target

KNOBS = make_knobs({"dist_m": 32, "dist_n": 32, "vec_m": 4, "vec_n": 32, "vec_k": 8})


def _prepare(benchmark: Path, folder: Path, knobs: object = KNOBS) -> tuple[Path, Path, Path]:
    target = parse_target("cpu")
    context = ir.Context()
    with context:
        module = ir.Module.parse(benchmark.read_text())
        problem = parse_problem(find_root_op(module))
    stripped = folder / "stripped.mlir"
    strip_configurations(benchmark, stripped, timeout_s=60)
    info = space_for(target, problem).configuration(problem, KNOBS, context).compilation_info
    spec = folder / "1_spec.mlir"
    spec.write_text(render_spec(build_spec([MatcherEntry(problem, info)], context)))
    baseline = folder / "0_spec.mlir"
    baseline.write_text(BASELINE_SPEC_TEXT)
    return stripped, baseline, spec


def _job(
    folder: Path, candidate_id: int, source: Path, spec: Path, extra: tuple[str, ...] = ()
) -> CompileJob:
    return CompileJob(
        candidate_id=candidate_id,
        request=build_request(
            parse_target("cpu"),
            source,
            folder / f"{candidate_id}.vmfb",
            phase_flags=("--compile-from=executable-sources", *extra),
            spec_path=spec,
            reproducer_path=folder / f"{candidate_id}_reproducer.mlir",
        ),
        log_path=folder / f"{candidate_id}.log",
    )


def test_spec_config_lands_in_the_configuration_dump(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    stripped, _, spec = _prepare(matmul_benchmark, tmp_path)
    dump = tmp_path / "configs"
    subprocess.run(
        [
            find_tool("iree-compile"),
            str(stripped),
            *parse_target("cpu").compile_flags(),
            "--compile-from=executable-sources",
            f"--iree-codegen-tuning-spec-path={spec}",
            "--mlir-disable-threading",
            "--compile-to=executable-configurations",
            f"--iree-hal-dump-executable-configurations-to={dump}",
            "-o",
            str(tmp_path / "configured.mlir"),
        ],
        check=True,
        capture_output=True,
    )
    dumped = "".join(p.read_text() for p in dump.iterdir())
    assert (
        "linalg.matmul {lowering_config = #iree_cpu.lowering_config<distribution = [32, 32, 0], "
        "vector_common_parallel = [4, 32, 0], vector_reduction = [0, 0, 8]>"
    ) in dumped


def test_candidates_compile_in_parallel_and_differ_from_the_baseline(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    stripped, baseline, spec = _prepare(matmul_benchmark, tmp_path)
    outcomes = sorted(
        LocalExecutor().compile(
            CompileBatch(
                [_job(tmp_path, 0, stripped, baseline), _job(tmp_path, 1, stripped, spec)], 2, 60
            )
        ),
        key=lambda o: o.candidate_id,
    )
    assert [o.status for o in outcomes] == [CompileStatus.COMPILED, CompileStatus.COMPILED]
    assert outcomes[0].binary_hash != outcomes[1].binary_hash
    assert not (tmp_path / "1_reproducer.mlir").exists()


def test_spec_that_matches_nothing_gives_the_baseline_binary(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    stripped, baseline, spec = _prepare(matmul_benchmark, tmp_path)
    unmatched = tmp_path / "2_spec.mlir"
    unmatched.write_text(spec.read_text().replace("%m_dims, [64]", "%m_dims, [65]"))
    assert unmatched.read_text() != spec.read_text()
    base = compile_one(_job(tmp_path, 0, stripped, baseline), 60)
    other = compile_one(_job(tmp_path, 2, stripped, unmatched), 60)
    assert base.binary_hash == other.binary_hash


def test_failed_compile_keeps_log_and_reason(matmul_benchmark: Path, tmp_path: Path) -> None:
    stripped, _, spec = _prepare(matmul_benchmark, tmp_path)
    broken = tmp_path / "3_spec.mlir"
    # A 16x64x64 f32 vector contraction is over the stack limit: the compiler rejects it.
    text = spec.read_text().replace(
        "[4, 32, 0], vector_reduction = [0, 0, 8]", "[16, 64, 0], vector_reduction = [0, 0, 64]"
    )
    assert text != spec.read_text()
    broken.write_text(text)
    outcome = compile_one(_job(tmp_path, 3, stripped, broken), 60)
    assert outcome.status is CompileStatus.FAILED
    assert outcome.reason.startswith("error:")
    assert (tmp_path / "3.log").read_text().startswith(find_tool("iree-compile"))
    assert not (tmp_path / "3.vmfb").exists()


def test_compile_past_its_timeout_is_recorded_as_timed_out(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    stripped, _, spec = _prepare(matmul_benchmark, tmp_path)
    outcome = compile_one(_job(tmp_path, 4, stripped, spec), timeout_s=0.01)
    assert (outcome.status, outcome.reason) == (CompileStatus.TIMED_OUT, "timed out after 0 s")
    assert shutil.which("true") is not None
