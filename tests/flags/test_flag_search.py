"""The flag phase with real compiles and timings on small models (llvm-cpu, local-task)."""

from __future__ import annotations

import hashlib
import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ireetune.benchmark.campaign import CampaignSettings
from ireetune.cli import _attach_flag_text, build_parser, main
from ireetune.core.flag_space import DEFAULT_FLAGS, FlagOption, FlagSet, FlagSpace
from ireetune.core.records import TIMED_STATUSES
from ireetune.executor import LocalExecutor
from ireetune.flags.dispatch_search import DispatchFlagSearch, search_dispatch_flags
from ireetune.flags.file import write_flags_file
from ireetune.flags.model_search import _speedup, search_model_flags
from ireetune.flags.trials import ModelFlagSearch, TrialStatus
from ireetune.flows.dispatch.tuner import TuneOptions, tune_dispatch
from ireetune.flows.model.tuner import ModelTuneOptions, tune_model
from ireetune.model.timing import SESSION_TIMES
from ireetune.targets import parse_target
from tests.conftest import (
    CPU_FLAGS,
    FAST_RUN_ARGS,
    FAST_RUN_OPTIONS,
    IREE_COMPILE,
    MATMUL_MODEL,
    TEST_TARGET,
)

DATA_TILING = ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=mmt4d")
# A winner that changes the matmul's binary on any x86-64 CPU and keeps it a matmul.
WINNER = ("--iree-llvmcpu-distribution-size=16",)
NARROW_ZNVER4 = (
    "--iree-llvmcpu-target-cpu=znver4",
    "--iree-llvmcpu-target-vector-width-in-bytes=16",
)
MATMUL_256 = (
    MATMUL_MODEL.replace("64x96", "256x256")
    .replace("96x128", "256x256")
    .replace("64x128", "256x256")
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def matmul_256(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 256^3 f32 matmul model and random inputs for its @main."""
    folder = tmp_path_factory.mktemp("matmul_256")
    model = folder / "matmul.mlir"
    model.write_text(MATMUL_256)
    rng = np.random.default_rng(0)
    inputs = folder / "inputs.npz"
    np.savez(
        inputs,
        arg0=rng.standard_normal((256, 256)).astype(np.float32),
        arg1=rng.standard_normal((256, 256)).astype(np.float32),
    )
    return model, inputs


def test_a_set_without_effect_is_not_timed_and_a_harmful_one_is_rejected(
    matmul_256: tuple[Path, Path], tmp_path: Path
) -> None:
    model, inputs = matmul_256
    space = FlagSpace(
        options=(
            # No convolution in a matmul model: the binary must equal the default's.
            FlagOption("im2col", (("--iree-global-opt-use-im2col-for-convs",),), "no effect"),
            # Distribution tiles of 4 elements: measured 2.4x slower on this model.
            FlagOption("tiny-tiles", (("--iree-llvmcpu-distribution-size=4",),), "harmful"),
            # Vectors narrower than the tiles the compiler picks for znver4: a compile error on
            # any host (the later CPU flag wins; a set that fails to compile never runs).
            FlagOption("narrow", (NARROW_ZNVER4,), "fails"),
        )
    )
    search = ModelFlagSearch(
        source_path=model, function="main", inputs_path=inputs, base_flags=tuple(CPU_FLAGS),
        user_flags=(), device="local-task", space=space, rounds=3,
    )  # fmt: skip
    result = search_model_flags(LocalExecutor(), search, tmp_path)
    by_flag = {t.flag_set.flags: t for t in result.trials}
    no_effect = by_flag[("--iree-global-opt-use-im2col-for-convs",)]
    harmful = by_flag[("--iree-llvmcpu-distribution-size=4",)]
    failed = by_flag[NARROW_ZNVER4]
    assert (no_effect.status, no_effect.times_ms, no_effect.first) == (
        TrialStatus.NO_EFFECT, (), None,
    )  # fmt: skip
    assert no_effect.binary_hash == result.trials[0].binary_hash
    assert harmful.status is TrialStatus.TIMED and harmful.verdict == "rejected"
    assert harmful.first is not None and harmful.first.speedup < 1.0
    assert failed.status is TrialStatus.COMPILE_FAILED and "large vector sizes" in failed.reason
    assert (result.winner, result.estimate, result.winner_binary) == (DEFAULT_FLAGS, None, None)
    # Only the default and the harmful set were ever run.
    assert sorted(p.name for p in (tmp_path / "session_1").iterdir()) == [
        "0_outputs.npz", f"{harmful.trial_id}_outputs.npz", SESSION_TIMES
    ]  # fmt: skip
    # The session's raw times stay, the default's too: the set's interval is computed again
    # from the file alone.
    session = json.loads((tmp_path / "session_1" / SESSION_TIMES).read_text())
    times = session["times_ms"]
    assert sorted(times) == ["0", str(harmful.trial_id)] and times["0"]
    assert tuple(times[str(harmful.trial_id)]) == harmful.times_ms
    assert _speedup(times["0"], times[str(harmful.trial_id)], session["calls_per_round"]) == (
        harmful.first
    )
    recorded = json.loads(result.trials_path.read_text())
    assert [row["status"] for row in recorded["trials"]] == [
        "default", "no-effect", "timed", "compile-failed"
    ]  # fmt: skip
    assert recorded["trials"][2]["verdict"] == "rejected" and recorded["winner"] == []
    # Decided: only the default's binary is left (no set won); the trials keep the others' hashes.
    assert sorted(p.name for p in tmp_path.glob("*.vmfb")) == ["0.vmfb"]
    assert "removed the binaries of 2 flag set(s) that were not kept" in recorded["notes"][-1]


def test_the_winning_flags_reach_every_compile_of_the_dispatch_phase(
    matmul_model: Path, tmp_path: Path
) -> None:
    # A threshold of 0 makes the one proposed set win whatever the timing: what is tested is
    # where the winner goes next, not the timing.
    result = tune_model(
        ModelTuneOptions(
            model_path=matmul_model, output_dir=tmp_path, num_candidates=2,
            candidates_per_dispatch=1, rounds=2, max_dispatches=1, flag_sets=(WINNER,),
            flag_threshold=0.0, target=TEST_TARGET,
        )
    )  # fmt: skip
    assert result.flags == WINNER
    assert result.flag_search is not None and result.flag_search.winner == FlagSet(WINNER)
    # The phase ranks the sets that pass by their interval's lower bound.
    trials_file = json.loads(result.flag_search.trials_path.read_text())
    assert (
        trials_file["rule"]
        == "paired-bootstrap/0.95/above-0/real-input/by-low/faster-half-mean/median-guard/v1"
    )
    # The winner keeps the matmul a matmul (under data tiling it would be an mmt4d, which the
    # model flow does not tune: test_data_tiled_matmuls_are_not_tuned_in_a_model).
    problems = [d.problem for d in result.dispatches]
    assert problems == ["matmul_64x128x96_f32_f32_f32"]
    # The dispatch tuner ran under the winner, and its baseline binary proves it.
    (tuning_run,) = (result.run_dir / "tuning").iterdir()
    dispatch_results = json.loads((tuning_run / "results.json").read_text())
    assert dispatch_results["global_flags"] == list(WINNER)
    assert (tuning_run / "tuned_flags.txt").read_text().split() == list(WINNER)
    baseline = next(c for c in dispatch_results["candidates"] if c["candidate_id"] == 0)
    # A model's dispatch session compiles its candidates from the dumped benchmark (it decides
    # on it, as the profile times the dispatch).
    reference = tuning_run / "inputs" / "stripped_benchmark.mlir"
    spec_flag = f"--iree-codegen-tuning-spec-path={tuning_run / 'specs' / '0_spec.mlir'}"
    hashes = {}
    for name, flags in (("with", WINNER), ("without", ())):
        output = tmp_path / f"{name}.vmfb"
        subprocess.run(
            [IREE_COMPILE, str(reference), "--compile-from=executable-sources", *CPU_FLAGS, *flags, spec_flag, "--mlir-disable-threading", "-o", str(output)],
            check=True, capture_output=True,
        )  # fmt: skip
        hashes[name] = _sha256(output)
    assert baseline["binary_hash"] == hashes["with"] != hashes["without"]
    # The user's result: flags file, report, and the database row.
    assert result.tuned_flags_path is not None
    assert result.tuned_flags_path.read_text() == "".join(f"{f}\n" for f in WINNER)
    assert f"kept {' '.join(WINNER)}" in (result.run_dir / "report.txt").read_text()
    # The one command the report gives builds the tuned model.
    report_text = (result.run_dir / "report.txt").read_text()
    # The report opens with the whole deployment: the flags' combined result, not the spec's.
    assert report_text.startswith("result: The tuned model (flags")
    deployment = json.loads((result.run_dir / "report.json").read_text())["deployment"]
    assert result.combined is not None
    assert deployment["speedup"]["value"] == result.combined.speedup
    apply_line = next(line for line in report_text.splitlines() if line.startswith("apply: "))
    words = shlex.split(apply_line.removeprefix("apply: "))
    assert (words[0], words[-2:]) == ("iree-compile", ["-o", "model.vmfb"])
    applied = tmp_path / "applied.vmfb"
    subprocess.run([IREE_COMPILE, *words[1:-1], str(applied)], check=True, capture_output=True)
    expected = (
        result.run_dir / "tuned.vmfb"
        if result.tuned_spec_path
        else result.flag_search.winner_binary
    )
    assert expected is not None and _sha256(applied) == _sha256(expected)
    report = json.loads((result.run_dir / "report.json").read_text())
    assert report["flags"] == list(WINNER)
    assert report["combined_speedup"] is not None
    from ireetune.database.store import default_database_path

    with sqlite3.connect(default_database_path()) as connection:
        rows = connection.execute("SELECT flags, model_name FROM model_results").fetchall()
    assert rows == [(json.dumps(list(WINNER)), matmul_model.name)]


def test_under_late_data_tiling_a_models_mmt4d_is_tuned_and_its_spec_lands(
    matmul_model: Path, tmp_path: Path
) -> None:
    """Under `--iree-opt-data-tiling` the matmul is an mmt4d between packs (whose inner tile is
    the CPU's: 16x16 with AVX-512, 8x8 with AVX2). The llvm-cpu target adds MATERIALIZE_FIRST to
    every compile of the run and to tuned_flags.txt (issue 39: before, the flags stayed as the
    search chose them and the profile called the mmt4d "not tunable"), so the profile calls it
    tunable, it is tuned, and its specs land in the whole model."""
    from ireetune.spec.apply import compile_with_spec, resolve_compile_target
    from ireetune.targets.llvm_cpu.flags import MATERIALIZE_FIRST

    result = tune_model(
        ModelTuneOptions(
            model_path=matmul_model, output_dir=tmp_path, num_candidates=2,
            candidates_per_dispatch=1, rounds=2, max_dispatches=3, flag_sets=(DATA_TILING,),
            flag_threshold=0.0, target=TEST_TARGET,
        )
    )  # fmt: skip
    assert result.flags == (*DATA_TILING, MATERIALIZE_FIRST)
    assert result.tuned_flags_path is not None
    assert result.tuned_flags_path.read_text().splitlines() == list(result.flags)
    problems = [d.problem for d in result.dispatches]
    assert any(p.startswith("mmt4d_") and "x96x1_f32_f32_f32" in p for p in problems), problems
    # The packs between are a family of their own, tunable once the encodings are materialised.
    assert any(p.startswith("pack_") for p in problems), problems
    specs = [
        path
        for path in sorted((result.run_dir / "tuning").rglob("*.mlir"))
        if "Mmt4dTilingExpert" in path.read_text()
        and "transform.named_sequence" in path.read_text()
    ]
    assert specs
    target = resolve_compile_target(TEST_TARGET, result.flags)
    report = compile_with_spec(matmul_model, target, specs[0], tmp_path / "t.vmfb", timeout_s=120)
    assert [check.landed for check in report.checks] == [True]


def test_tuned_flags_file_is_accepted_by_iree_compile(matmul_model: Path, tmp_path: Path) -> None:
    flags_file = tmp_path / "tuned_flags.txt"
    write_flags_file(flags_file, DATA_TILING)
    binaries = {}
    for name, flags in (("file", [f"@{flags_file}"]), ("inline", list(DATA_TILING)), ("none", [])):
        output = tmp_path / f"{name}.vmfb"
        subprocess.run(
            [IREE_COMPILE, str(matmul_model), *CPU_FLAGS, *flags, "-o", str(output)],
            check=True, capture_output=True,
        )  # fmt: skip
        binaries[name] = _sha256(output)
    assert binaries["file"] == binaries["inline"] != binaries["none"]
    # `ireetune compile --flags-file` applies the same flags.
    output = tmp_path / "ireetune.vmfb"
    status = main(
        ["compile", str(matmul_model), "--target", TEST_TARGET, "--flags-file", str(flags_file),
         "-o", str(output)]
    )  # fmt: skip
    assert status == 0 and _sha256(output) == binaries["inline"]
    assert main(["compile", str(matmul_model), "--target", TEST_TARGET, "-o", str(output)]) == 2


def test_search_flags_on_a_dispatch_benchmark_is_recorded_in_the_run(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(matmul_benchmark),
         "--target", TEST_TARGET, "--search-flags", "--num-candidates", "2", "--output-dir", str(tmp_path), "--no-db",
         *FAST_RUN_ARGS],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    (flags_dir,) = tmp_path.glob("flags_*")
    (run_dir,) = tmp_path.glob("matmul_*")
    results = json.loads((run_dir / "results.json").read_text())
    search = results["flag_search"]
    assert search["trials_file"] == str(flags_dir / "trials.json")
    statuses = {tuple(row["flags"]): row["status"] for row in search["trials"]}
    assert statuses[()] == "default"
    assert statuses[("--iree-opt-data-tiling",)] == "no-effect"
    assert results["global_flags"] == search["winner"]
    assert "flag search: " in completed.stdout


def test_bad_flags_give_one_line_and_exit_2(matmul_benchmark: Path, tmp_path: Path) -> None:
    cases = {
        "iree-opt-data-tiling": "is not an iree-compile option",
        "--iree-hal-target-device=cuda": "is set by ireetune itself",
        "--iree-no-such-option": "iree-compile rejects the flags: iree-compile: Unknown command",
        "--iree-opt-data-tiling=maybe": "iree-compile rejects the flags",
    }
    for text, message in cases.items():
        completed = subprocess.run(
            [sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(matmul_benchmark),
             "--flags", text, "--output-dir", str(tmp_path), "--no-db"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert completed.returncode == 2, (text, completed.stderr)
        assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
        assert message in completed.stderr, (text, completed.stderr)
    assert not list(tmp_path.iterdir())
    # A single flag after --flags is its value, not an option of ireetune.
    words = _attach_flag_text(["tune-dispatch", "x.mlir", "--flags", "--iree-opt-data-tiling"])
    assert build_parser().parse_args(words).extra_flags == ("--iree-opt-data-tiling",)


def test_dispatch_level_search_finds_data_tiling_has_no_effect_on_a_formed_dispatch(
    matmul_benchmark: Path, tmp_path: Path
) -> None:
    space = FlagSpace((), (("--iree-opt-data-tiling",), ("--iree-llvmcpu-distribution-size=4",)))
    search = DispatchFlagSearch(
        parse_target(TEST_TARGET), 1.02,
        CampaignSettings(repetitions=2, min_repetition_s=0.005, confirm_rounds=2), jobs=2,
        compile_timeout_s=120, seed=0, space=space,
    )  # fmt: skip
    result = search_dispatch_flags(LocalExecutor(), matmul_benchmark, search, tmp_path)
    by_flags = {t.flag_set.flags: t for t in result.trials}
    # Data tiling acts when dispatches are formed; a dumped dispatch is already formed.
    assert by_flags[("--iree-opt-data-tiling",)].status is TrialStatus.NO_EFFECT
    harmful = by_flags[("--iree-llvmcpu-distribution-size=4",)]
    assert (harmful.status, harmful.verdict) == (TrialStatus.TIMED, "rejected")
    assert result.winner == DEFAULT_FLAGS
    assert json.loads(result.trials_path.read_text())["level"] == "dispatch"


def test_tune_dispatch_under_extra_flags_tunes_the_mmt4d(
    matmul_model: Path, tmp_path: Path
) -> None:
    result = tune_dispatch(
        TuneOptions(
            input_path=matmul_model, dispatch="main_dispatch_0", num_candidates=3,
            output_dir=tmp_path, **FAST_RUN_OPTIONS,
            model_level_rounds=2, extra_flags=DATA_TILING, use_database=False,
        )
    )  # fmt: skip
    assert result.problem.signature == "mmt4d_4x16x8x16x96x1_f32_f32_f32"
    candidates = [r for r in result.records if not r.is_baseline]
    assert candidates and all(r.knobs is not None for r in candidates)
    # Each candidate's distribution tile landed: binaries differ from the default's.
    assert all(r.status in TIMED_STATUSES for r in candidates), [
        (r.status, r.reason) for r in candidates
    ]
