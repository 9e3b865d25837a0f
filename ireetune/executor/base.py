"""Where compiles and measurements run: the executor interface and the local executor.

Every stage compiles through `compile_all` (compile/pool.py) and measures through
`run_benchmarks`, `run_reference_programs` and `run_models_side_by_side`; each of those hands its
work to the executor in use. The local executor (the default: nothing to start) runs compiles on
a thread pool and measurements in worker processes on this host's devices. The Ray executor
(`ray_executor.py`) runs compiles as Ray tasks on a cluster's nodes and measurements in Ray actors
pinned to one device each. Results come back to the driver, which alone writes the run folder
and the database, so a run's outcome is the same on either.

Runtime-only: the benchmark side imports this, so nothing here may import the compiler.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ireetune.benchmark.runner import BenchmarkJob, BenchmarkOutcome, JobDeadlines, JobFeed
    from ireetune.compile.pool import CompileJob, CompileOutcome
    from ireetune.model.timing import ModelRun
    from ireetune.verify.runner import ReferenceRun


class Executor(abc.ABC):
    """Runs compile jobs and measurement jobs somewhere; returns their outcomes to the driver."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Name the executor as the user chose it (`local`, `ray`)."""

    @abc.abstractmethod
    def compile(
        self, jobs: Sequence[CompileJob], workers: int, timeout_s: float
    ) -> Iterator[CompileOutcome]:
        """Compile every job (each its own compiler process); yield outcomes as they finish.

        A job's binary, reproducer and log end up at the job's own paths on the driver.
        """

    @abc.abstractmethod
    def run_benchmarks(
        self,
        jobs: Sequence[BenchmarkJob] | JobFeed,
        device: str,
        repetitions: int,
        batch: int,
        timeout_s: float,
        hopeless_ms: float | None = None,
        min_repetition_s: float = 0.05,
        hopeless_factor: float | None = None,
        timeout_after_first: Callable[[BenchmarkOutcome], JobDeadlines] | None = None,
        screen_fraction: float = 1.0,
        prewarm: int = 0,
    ) -> Generator[BenchmarkOutcome, None, None]:
        """Time each job on `device`; yield one outcome per job, in job order (benchmark/runner.py).

        `jobs` may be a `JobFeed` that grows while the session runs (a benchmark session: the
        campaign streams candidates and confirmation rounds into it)."""

    @abc.abstractmethod
    def run_reference_programs(
        self,
        jobs: Sequence[tuple[int, Path, Path]],
        device: str,
        inputs_path: Path,
        repetitions: int = 3,
        timeout_s: float = 600.0,
    ) -> dict[int, ReferenceRun]:
        """Run each (candidate_id, binary, output path) on the inputs (verify/runner.py)."""

    @abc.abstractmethod
    def run_models_side_by_side(
        self,
        models: Sequence[tuple[str, Path]],
        function: str,
        inputs_path: Path,
        work_dir: Path,
        device: str,
        rounds: int,
        repetitions: int = 1,
        timeout_s: float = 1800.0,
        parameters: Sequence[Path] = (),
    ) -> dict[str, ModelRun]:
        """Time several compiled models interleaved on one device (model/timing.py); the models
        read their weights from the `parameters` archives, if any."""

    def close(self) -> None:
        """Give back what the executor holds (actors, a cluster connection); default: nothing."""
        return None


class LocalExecutor(Executor):
    """This host: a thread pool of compiler processes, worker processes on local devices."""

    @property
    def name(self) -> str:
        return "local"

    def compile(
        self, jobs: Sequence[CompileJob], workers: int, timeout_s: float
    ) -> Iterator[CompileOutcome]:
        from ireetune.compile.pool import compile_on_threads

        return compile_on_threads(jobs, workers, timeout_s)

    def run_benchmarks(
        self,
        jobs: Sequence[BenchmarkJob] | JobFeed,
        device: str,
        repetitions: int,
        batch: int,
        timeout_s: float,
        hopeless_ms: float | None = None,
        min_repetition_s: float = 0.05,
        hopeless_factor: float | None = None,
        timeout_after_first: Callable[[BenchmarkOutcome], JobDeadlines] | None = None,
        screen_fraction: float = 1.0,
        prewarm: int = 0,
    ) -> Generator[BenchmarkOutcome, None, None]:
        from ireetune.benchmark.runner import run_benchmarks_here

        return run_benchmarks_here(
            jobs, device, repetitions, batch, timeout_s, hopeless_ms, min_repetition_s,
            hopeless_factor, timeout_after_first, screen_fraction, prewarm,
        )  # fmt: skip

    def run_reference_programs(
        self,
        jobs: Sequence[tuple[int, Path, Path]],
        device: str,
        inputs_path: Path,
        repetitions: int = 3,
        timeout_s: float = 600.0,
    ) -> dict[int, ReferenceRun]:
        from ireetune.verify.runner import run_reference_programs_here

        return run_reference_programs_here(jobs, device, inputs_path, repetitions, timeout_s)

    def run_models_side_by_side(
        self,
        models: Sequence[tuple[str, Path]],
        function: str,
        inputs_path: Path,
        work_dir: Path,
        device: str,
        rounds: int,
        repetitions: int = 1,
        timeout_s: float = 1800.0,
        parameters: Sequence[Path] = (),
    ) -> dict[str, ModelRun]:
        from ireetune.model.timing import run_models_side_by_side_here

        return run_models_side_by_side_here(
            models,
            function,
            inputs_path,
            work_dir,
            device,
            rounds,
            repetitions,
            timeout_s,
            parameters,
        )


# The executor in use. Module-wide, not per thread: the benchmark campaign measures each device
# from a thread of its own, and those threads must use the run's executor too.
_LOCAL = LocalExecutor()
_current: Executor = _LOCAL
_current_lock = threading.Lock()


def current_executor() -> Executor:
    """Return the executor compiles and measurements go to now (the local one by default)."""
    return _current


@contextlib.contextmanager
def use_executor(executor: Executor) -> Iterator[Executor]:
    """Send every compile and measurement to `executor` inside the block."""
    global _current
    with _current_lock:
        previous, _current = _current, executor
    try:
        yield executor
    finally:
        with _current_lock:
            _current = previous
