"""Where compiles and measurements run: the executor interface and the local executor.

A flow creates one executor for its run (`open_executor`, from `--executor`) and hands it to
every stage that compiles or measures. A stage describes its work as one typed request (a
`CompileBatch`, a `BenchmarkSession`, a `ReferenceBatch`, a `ModelComparison`, each defined beside
the job type it carries) and gives it to that executor. The local executor (nothing to start)
runs compiles on a thread pool and measurements in worker processes on this host's devices. The
Ray executor (`ray_executor.py`) runs compiles as Ray tasks on a cluster's nodes and
measurements in Ray actors pinned to one device each. Results come back to the driver, which
alone writes the run folder and the database, so a run's outcome is the same on either.

Runtime-only: the benchmark side imports this, so nothing here may import the compiler.
"""

from __future__ import annotations

import abc
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ireetune.benchmark.runner import BenchmarkOutcome, BenchmarkSession
    from ireetune.compile.pool import CompileBatch, CompileOutcome
    from ireetune.model.in_model_times import InModelTimes
    from ireetune.model.timing import ModelComparison, ModelRun
    from ireetune.verify.runner import ReferenceBatch, ReferenceRun


class Executor(abc.ABC):
    """Runs compile jobs and measurement jobs somewhere; returns their outcomes to the driver."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Name the executor as the user chose it (`local`, `ray`)."""

    @abc.abstractmethod
    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        """Compile every job (each its own compiler process); yield outcomes as they finish.

        A job's binary, reproducer and log end up at the job's own paths on the driver.
        """

    @abc.abstractmethod
    def run_benchmarks(self, session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
        """Time each job of the session; yield one outcome per job, in job order
        (benchmark/runner.py). The session's jobs may be a `JobFeed` that grows while it runs."""

    @abc.abstractmethod
    def run_reference_programs(self, batch: ReferenceBatch) -> dict[int, ReferenceRun]:
        """Run each reference program on the inputs; leave each output at its job's path
        (verify/runner.py)."""

    @abc.abstractmethod
    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        """Time several compiled models interleaved on one device (model/timing.py)."""

    def profile_model(self, comparison: ModelComparison, calls: int) -> InModelTimes:
        """Time each dispatch inside `calls` calls of the comparison's one model on its device
        (model/in_model_times.py); default: not here, the reason says so, and the profile
        times the dispatch benchmarks alone instead."""
        from ireetune.model.in_model_times import InModelTimes

        return InModelTimes({}, {}, 0, f"the {self.name} executor does not profile whole models")

    def close(self) -> None:
        """Give back what the executor holds (actors, a cluster connection); default: nothing."""
        return None


class LocalExecutor(Executor):
    """This host: a thread pool of compiler processes, worker processes on local devices."""

    @property
    def name(self) -> str:
        return "local"

    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        from ireetune.compile.pool import compile_on_threads

        return compile_on_threads(batch)

    def run_benchmarks(self, session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
        from ireetune.benchmark.runner import run_benchmarks_here

        return run_benchmarks_here(session)

    def run_reference_programs(self, batch: ReferenceBatch) -> dict[int, ReferenceRun]:
        from ireetune.verify.runner import run_reference_programs_here

        return run_reference_programs_here(batch)

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        from ireetune.model.timing import run_models_side_by_side_here

        return run_models_side_by_side_here(comparison)

    def profile_model(self, comparison: ModelComparison, calls: int) -> InModelTimes:
        from ireetune.model.in_model_times import profile_model_here

        return profile_model_here(comparison, calls)
