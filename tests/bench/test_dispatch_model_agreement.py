"""bench/dispatch_model_agreement.py: candidates' speedups alone against in the model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "bench"))

import dispatch_model_agreement as agreement  # noqa: E402


def _run(run_dir: Path, alone: dict[str, float], in_model: dict[str, float]) -> Path:
    """Write a finished model run's two files: each spec's dispatch session (default 1 ms) and
    its single-candidate variant, plus joint variants that must not count."""
    run_dir.mkdir()
    candidates = [
        {"spec": f"tuning/t/{name}.mlir", "default_ms": 1.0, "candidate_ms": 1.0 / speedup}
        for name, speedup in alone.items()
    ]
    state = {"dispatches": {"d0": {"candidates": candidates, "winner": ""}}}
    (run_dir / "model_run.json").write_text(json.dumps(state))
    trials = [
        {"variant": f"d0c{i}", "specs": [str(run_dir / f"tuning/t/{name}.mlir")], "speedup": s}
        for i, (name, s) in enumerate(in_model.items())
    ]
    trials.append({"variant": "best", "specs": [str(run_dir / "tuning/t/a.mlir")], "speedup": 9.0})
    # Every dispatch's second candidate together (a rank's joint variant).
    joint = [str(run_dir / f"tuning/t/{name}.mlir") for name in list(in_model)[:2]]
    if len(joint) == 2:
        trials.append({"variant": "rank1", "specs": joint, "speedup": 8.0})
    (run_dir / "selection").mkdir()
    (run_dir / "selection" / "trials.json").write_text(json.dumps(trials))
    return run_dir


def test_pairs_join_each_candidate_alone_and_in_the_model(tmp_path: Path) -> None:
    run_dir = _run(
        tmp_path / "run",
        {"a": 1.2, "b": 1.1, "c": 0.9, "d": 1.05},
        {"a": 1.03, "b": 0.99, "c": 0.98, "d": 1.0},
    )
    pairs = agreement.read_pairs(run_dir)
    assert [(p.spec, p.alone, p.in_model) for p in pairs] == [
        ("tuning/t/a.mlir", 1.2, 1.03),
        ("tuning/t/b.mlir", 1.1, 0.99),
        ("tuning/t/c.mlir", 1.0 / (1.0 / 0.9), 0.98),
        ("tuning/t/d.mlir", 1.0 / (1.0 / 1.05), 1.0),
    ]
    # Ranks alone a > b > d > c, in the model a > d > b > c: rho = 1 - 6 * 2 / (4 * 15) = 0.8.
    assert agreement.summarise(pairs) == {
        "pairs": 4,
        "spearman": 0.8,
        "faster_alone": 3,
        "faster_alone_not_in_model": 2,
    }
    assert agreement.summarise(pairs[:2])["spearman"] is None


def test_a_run_with_a_relative_output_dir_is_read_from_anywhere(tmp_path: Path) -> None:
    # `ireetune tune ... --output-dir runs/x` records the variants' specs relative to where it
    # ran (runs/x/<run>/tuning/...), not to where the bench runs. Here the run folder is named
    # `t`, as a folder inside it is: the path is cut where the rest lies in the run folder.
    run_dir = _run(tmp_path / "t", {"a": 1.2}, {"a": 1.03})
    (run_dir / "tuning" / "t").mkdir(parents=True)
    (run_dir / "tuning" / "t" / "a.mlir").write_text("")
    trials_path = run_dir / "selection" / "trials.json"
    trials = json.loads(trials_path.read_text())
    for trial in trials:
        trial["specs"] = [f"runs/x/t/{Path(spec).relative_to(run_dir)}" for spec in trial["specs"]]
    trials_path.write_text(json.dumps(trials))
    assert [(p.spec, p.in_model) for p in agreement.read_pairs(run_dir)] == [
        ("tuning/t/a.mlir", 1.03)
    ]


def test_profiled_variants_give_the_in_model_dispatch_speedups_agreement(tmp_path: Path) -> None:
    """A single-candidate variant whose profile read its dispatch's time inside the model
    (`in_model_ratios`) pairs 1 / ratio with the model's speedup; joint variants' ratios and
    unprofiled variants do not count."""
    run_dir = _run(
        tmp_path / "run",
        {"a": 1.2, "b": 1.1, "c": 0.9, "d": 1.05},
        {"a": 1.03, "b": 0.99, "c": 0.98, "d": 1.0},
    )
    trials_path = run_dir / "selection" / "trials.json"
    trials = json.loads(trials_path.read_text())
    ratios = {"d0c0": 0.8, "d0c1": 1.05, "d0c2": 1.1}  # d0c3 (d) was not profiled
    for trial in trials:
        if trial["variant"] in ratios:
            trial["in_model_ratios"] = {"d0": ratios[trial["variant"]]}
        elif trial["variant"] == "rank1":
            trial["in_model_ratios"] = {"d0": 0.5, "d1": 0.5}
    trials_path.write_text(json.dumps(trials))
    pairs = agreement.read_pairs(run_dir)
    assert [p.profiled for p in pairs] == [1.25, 1 / 1.05, 1 / 1.1, None]
    # Profiled a > b > c, in the model a > b > c: rho 1; only a is faster by its profile.
    assert agreement.summarise(pairs)["profiled"] == {
        "pairs": 3,
        "spearman": 1.0,
        "faster_profiled": 1,
        "faster_profiled_not_in_model": 0,
    }
    # Without profiles the summary has no such part.
    assert "profiled" not in agreement.summarise([p for p in pairs if p.profiled is None])


def test_each_tuned_dispatchs_headroom_pairs_with_its_best_speedup_alone(tmp_path: Path) -> None:
    """profile.json gives each dispatch's work and time: the convolution sets the FLOP ceiling,
    the copy the byte ceiling, the window runs at a tenth of both. model_run.json gives each
    tuned dispatch's best kept candidate; an untuned dispatch, and one of unknown work, give
    no pair."""
    from ireetune.model.hot import DispatchProfile, select_hot_dispatches
    from ireetune.model.profile import write_profile

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    profiles = [
        DispatchProfile(name, run_dir / f"{name}.mlir", f"conv_{name}", True, ms, 1, None, f, b)
        for name, ms, f, b in [
            ("conv", 4.0, 4_000_000_000, 1_000_000),
            ("copy", 1.0, 0, 100_000_000),
            ("window", 1.0, 100_000_000, 10_000_000),
            ("half", 1.0, 200_000_000, 50_000_000),
        ]
    ]
    write_profile(run_dir, select_hot_dispatches(profiles, 7.0, 1.0, 8))

    def kept(*speedups: float) -> dict[str, object]:
        return {
            "candidates": [
                {"spec": f"s{i}.mlir", "default_ms": 1.0, "candidate_ms": 1.0 / s}
                for i, s in enumerate(speedups)
            ]
        }

    state = {"dispatches": {"conv": kept(0.9, 1.02), "window": kept(2.0, 1.5), "half": kept(1.1)}}
    (run_dir / "model_run.json").write_text(json.dumps(state))
    pairs = sorted(agreement.read_headroom(run_dir))
    assert pairs == [(0.1, 2.0), (0.5, 1.1), (1.0, 1.02)]
    assert agreement.headroom_agreement(pairs) == {
        "pairs": 3,
        "spearman": -1.0,
        "median_below_0.3": 2.0,
        "median_above_0.7": 1.02,
    }


def test_the_ceiling_sums_each_dispatchs_fastest_cut_inside_the_model(tmp_path: Path) -> None:
    """Each profiled dispatch counts once, by its lowest in-model ratio over every variant
    (joint or alone); one never faster cuts nothing; its share is of the profiled model time."""
    run_dir = tmp_path / "run"
    (run_dir / "selection").mkdir(parents=True)
    profile = {
        "model_ms": 10.0,
        "dispatches": [
            {"name": "a", "total_ms": 4.0},
            {"name": "b", "total_ms": 2.0},
            {"name": "c", "total_ms": 1.0},
        ],
    }
    (run_dir / "profile.json").write_text(json.dumps(profile))
    trials = [
        {"variant": "best", "in_model_ratios": {"a": 0.9, "b": 1.2}},
        {"variant": "d0c1", "in_model_ratios": {"a": 0.75}},
        {"variant": "d2c0", "in_model_ratios": {"c": 1.05}},
        {"variant": "d1c0"},
    ]
    (run_dir / "selection" / "trials.json").write_text(json.dumps(trials))
    # a: 4 ms * 0.25; b and c slower everywhere.
    assert agreement.read_ceiling(run_dir) == {"profiled": 3, "faster": 1, "cut": 0.1}
    (run_dir / "selection" / "trials.json").write_text(json.dumps([{"variant": "d0c0"}]))
    assert agreement.read_ceiling(run_dir) is None


def test_the_roofline_counts_each_known_dispatchs_time_over_its_bound(tmp_path: Path) -> None:
    """At 100 GFLOP/s and 10 GB/s: the matmul's 2e8 FLOPs take at least 2 ms a launch (3 ms
    over in two launches of 2.5 ms), the copy's 2e7 bytes 2 ms (none over: it runs at its
    bound); a dispatch of unknown work, and an untimed one, count nothing."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [
        ("matmul", 5.0, 2.5, 2, 200_000_000, 1_000_000),
        ("copy", 1.5, 1.5, 1, 0, 20_000_000),
        ("unknown", 1.0, 1.0, 1, 0, 0),
        ("untimed", 1.0, None, 1, 1_000_000_000, 0),
    ]
    profile = {
        "model_ms": 10.0,
        "dispatches": [
            {"name": n, "total_ms": t, "dispatch_ms": d, "invocations": i, "flops": f, "bytes": b}
            for n, t, d, i, f, b in rows
        ],
    }
    (run_dir / "profile.json").write_text(json.dumps(profile))
    assert agreement.read_roofline(run_dir, 100.0, 10.0) == {"over": 0.1, "at_most": 1.111}


def test_the_roofline_needs_both_peaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model_run.json").write_text("{}")
    for given in (["--peak-gflops", "228"], ["--peak-gflops", "228", "--peak-gbs", "0"]):
        monkeypatch.setattr(sys, "argv", ["agreement", str(run_dir), *given])
        assert agreement.main() == 2
        assert capsys.readouterr().err.startswith("error: give both --peak-gflops and --peak-gbs")
