"""The space cache: a space read once, its solutions drawn once, kept beside the database."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.candidate import make_knobs
from ireetune.core.target import SpaceRequest
from ireetune.database.space_cache import SpaceCache, compute_cache_key, stored_first
from ireetune.frontend.load import load_dispatch
from ireetune.targets import parse_target
from tests.targets.gpu.test_gpu_compile import MMT_F16, dump_gpu_benchmark

POOL = 24


def test_solutions_come_back_once_each_in_the_order_drawn(tmp_path: Path) -> None:
    cache = SpaceCache(tmp_path / "entry")
    first = make_knobs({"pipeline": "TileAndFuse", "space": 0, "wg_0": 64})
    second = make_knobs({"pipeline": "TileAndFuse", "space": 0, "wg_0": 128})
    for knobs in (first, second, first):
        cache.add_solution(knobs)
    # A line cut short by a killed run is skipped.
    with open(tmp_path / "entry" / "solutions.jsonl", "a") as handle:
        handle.write('{"pipeline": "TileAnd')
    assert cache.read_solutions() == [first, second]


def test_an_entry_without_its_space_reads_as_missing(tmp_path: Path) -> None:
    cache = SpaceCache(tmp_path / "entry")
    assert cache.read_space() is None
    cache.write_space("module {}", None, {"problem": "p"})
    assert cache.read_space() == ("module {}", None)


def test_the_key_depends_on_every_part() -> None:
    key = compute_cache_key(["problem", "cuda:sm_80", "iree-base-compiler 3.13.0"])
    assert key == compute_cache_key(["problem", "cuda:sm_80", "iree-base-compiler 3.13.0"])
    assert key != compute_cache_key(["problem", "rocm:gfx942", "iree-base-compiler 3.13.0"])
    assert key != compute_cache_key(["problem", "cuda:sm_80", "iree-base-compiler 3.14.0"])


def test_stored_solutions_are_shuffled_by_the_seed() -> None:
    stored = [make_knobs({"tile": t}) for t in range(20)]
    assert stored_first(stored, 1) == stored_first(stored, 1)
    assert stored_first(stored, 1) != stored_first(stored, 2)
    assert sorted(stored_first(stored, 1)) == sorted(stored)


def _draw(
    target_name: str, benchmark: Path, cache_root: Path, seed: int, count: int = POOL
) -> list[object]:
    target = parse_target(target_name)
    target.cache_folder = cache_root
    context = ir.Context()
    scratch = cache_root.parent / f"scratch_{time.monotonic_ns()}"
    dispatch = load_dispatch(benchmark, None, target, scratch, context)
    generated = dispatch.space.generate(
        SpaceRequest(dispatch.problem, dispatch.variant_target, dispatch.default_knobs, seed)
    )
    return list(itertools.islice(generated, count))


def test_a_cpu_pool_comes_from_the_stored_solutions(matmul_benchmark: Path, tmp_path: Path) -> None:
    cache_root = tmp_path / "spaces"
    first = _draw("cpu", matmul_benchmark, cache_root, seed=0)
    (entry,) = cache_root.iterdir()
    stored_lines = (entry / "solutions.jsonl").read_text()
    assert len(stored_lines.splitlines()) == POOL
    again = _draw("cpu", matmul_benchmark, cache_root, seed=0)
    # The same candidates (in a seeded order), and nothing drawn afresh.
    assert sorted(again) == sorted(first)  # type: ignore[type-var]
    assert (entry / "solutions.jsonl").read_text() == stored_lines
    # Asking for more than is stored draws the rest afresh, never a stored one twice, and
    # stores them too.
    more = _draw("cpu", matmul_benchmark, cache_root, seed=5, count=2 * POOL)
    assert len(set(more)) == 2 * POOL and set(first) <= set(more)
    assert len((entry / "solutions.jsonl").read_text().splitlines()) == 2 * POOL


@pytest.fixture(scope="module")
def sm80_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dump_gpu_benchmark(MMT_F16, "cuda:sm_80", tmp_path_factory.mktemp("sm80_cache"))


def test_a_gpu_space_is_read_from_the_cache_without_the_compiler(
    sm80_benchmark: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_root = tmp_path / "spaces"
    first = _draw("cuda:sm_80", sm80_benchmark, cache_root, seed=0)
    (entry,) = cache_root.iterdir()
    assert sorted(path.name for path in entry.iterdir()) == [
        "meta.json",
        "solutions.jsonl",
        "space.mlir",
    ]
    # A compiler that always fails: the second read must not need it.
    failing = tmp_path / "iree-compile"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("IREETUNE_IREE_COMPILE", str(failing))
    again = _draw("cuda:sm_80", sm80_benchmark, cache_root, seed=0)
    assert sorted(again) == sorted(first)  # type: ignore[type-var]
