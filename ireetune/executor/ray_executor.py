"""The Ray executor: compiles as Ray tasks on any node with the compiler, measurements in Ray
actors pinned to one device each.

Nothing is shared between the nodes but Ray's object store: a compile task receives its source
and spec as bytes, compiles them in a scratch folder of its node (the source under its own file
name, so the binary is the same bytes as a local compile's, see compile/driver.py) and returns
the binary, the reproducer and any dumped files as bytes; the driver writes them where the
request said. A measuring actor receives binaries and inputs the same way, runs the ordinary
crash-surviving worker process on its device (benchmark/runner.py) and streams outcomes back. The
driver alone writes the run folder and the database.

Faults: a compile task whose worker or node dies is run again elsewhere by Ray
(`compile_retries` times); after that, it is recorded as a failed compile with the reason and the
run goes on. A measuring actor that dies is restarted by Ray; the jobs it had not reported are
sent to it again, and after `_MEASURE_ATTEMPTS` losses recorded as crashed.

Ray is an optional dependency (`pip install 'ireetune[ray]'`), imported only here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ireetune.benchmark.runner import (
    BenchmarkJob,
    BenchmarkOutcome,
    BenchmarkSession,
    BenchmarkStatus,
    JobFeed,
)
from ireetune.compile.driver import CompileRequest, CompileResult, CompileStatus, run_compile
from ireetune.compile.pool import CompileBatch, CompileJob, CompileOutcome, record_outcome
from ireetune.core.errors import IreetuneError
from ireetune.core.files import write_bytes_once
from ireetune.executor.base import Executor
from ireetune.executor.flag_files import FlagFiles, place_flag_files, read_flag_files
from ireetune.executor.settings import RaySettings
from ireetune.model.timing import ModelComparison, ModelRun
from ireetune.verify.runner import ReferenceBatch, ReferenceRun

logger = logging.getLogger(__name__)

# Times a measuring call is sent again after its actor died before reporting every job.
_MEASURE_ATTEMPTS = 3
# How long a lost measuring actor may take to come back (a process start and imports).
_RESTART_WAIT_S = 120.0
# How long closing waits for the measuring actors to remove their files: an idle actor takes
# well under a second; one still busy with an interrupted run's call is killed with its files.
_CLOSE_WAIT_S = 5.0
# Fault injection for tests, read on the driver and sent with the work: a JSON object
# {"compile": "<spec file name>"} kills the Ray worker process compiling that spec, {"measure": N}
# the measuring actor as it is about to report candidate N (SIGKILL, as the out-of-memory killer
# would). With "marker": "<path>", only while that file does not exist yet (it is created first),
# so that the retry runs.
FAULT_VARIABLE = "IREETUNE_RAY_FAULT"
_GPU_DEVICE = re.compile(r"^(cuda|hip)://\d+$")
# Ray starts its worker processes at niceness 15, to keep its own daemons responsive. A compile
# or a measurement is the work itself: at niceness 15 on a host that runs anything else, a
# compile took 2-3x as long as locally (seen on this project's shared 2-core machine), and
# timings would suffer the same. Workers of these tasks and actors run at the normal priority.
_NORMAL_PRIORITY = {"env_vars": {"RAY_worker_niceness": "0"}}


def import_ray() -> Any:
    """Import Ray, or say in one line how to get it."""
    try:
        import ray
    except ImportError as error:
        raise IreetuneError(
            "--executor ray needs Ray: pip install 'ireetune[ray]' (or pip install ray)"
        ) from error
    return ray


@dataclass(frozen=True)
class _ShippedCompile:
    """A compile request with the files it reads, as a task receives it."""

    request: CompileRequest
    spec_text: bytes | None
    fault_hook: str
    flag_files: FlagFiles = ()  # files its flags name (executor/flag_files.py)


@dataclass(frozen=True)
class _CompiledFiles:
    """What a compile task sends back: its result and the files it made, as bytes."""

    result: CompileResult
    binary: bytes | None
    reproducer: bytes | None
    dumps: tuple[tuple[int, str, bytes], ...]  # (dump index, relative path, content)


def _maybe_kill_self(hook: str, kind: str, name: str | int) -> None:
    """Kill this process if the fault hook names this piece of work (see FAULT_VARIABLE)."""
    if not hook:
        return
    settings = json.loads(hook)
    if settings.get(kind) != name:
        return
    marker = settings.get("marker")
    if marker:
        try:
            # Exclusive creation: only the first attempt dies.
            Path(marker).open("x").close()
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def compile_shipped(shipped: _ShippedCompile, source: bytes) -> _CompiledFiles:
    """Run one shipped compile in a scratch folder of this node; return what it made.

    The source is kept per content under the node's temporary folder (every candidate of a
    dispatch shares it); the rest lives in a folder of the task's own, removed after.
    """
    request = shipped.request
    scratch = Path(tempfile.gettempdir()) / "ireetune_ray"
    digest = hashlib.sha256(source).hexdigest()[:20]
    source_path = scratch / "sources" / digest / request.source_path.name
    write_bytes_once(source_path, source)
    scratch.mkdir(parents=True, exist_ok=True)
    task_dir = Path(tempfile.mkdtemp(prefix="task_", dir=scratch))
    try:
        request, renames = place_flag_files(request, shipped.flag_files, task_dir)
        spec_path = None
        if request.spec_path is not None:
            assert shipped.spec_text is not None
            _maybe_kill_self(shipped.fault_hook, "compile", request.spec_path.name)
            # Under specs/ and its own name, as on the driver (a fault-injecting compiler in
            # the tests picks candidates by that name).
            spec_path = task_dir / "specs" / request.spec_path.name
            spec_path.parent.mkdir()
            spec_path.write_bytes(shipped.spec_text)
        reproducer = task_dir / "reproducer.mlir" if request.reproducer_path else None
        local = replace(
            request,
            source_path=source_path,
            output_path=task_dir / "output",
            spec_path=spec_path,
            dumps=tuple(
                (flag, task_dir / f"dump_{i}") for i, (flag, _) in enumerate(request.dumps)
            ),
            reproducer_path=reproducer,
        )
        result = run_compile(local)
        dumps = tuple(
            (index, str(path.relative_to(folder)), path.read_bytes())
            for index, (_, folder) in enumerate(local.dumps)
            if folder.is_dir()
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        )
        binary = local.output_path.read_bytes() if result.ok else None
        kept = result.reproducer_path.read_bytes() if result.reproducer_path else None
        # Name the driver's files in what the user reads, not this node's scratch folder.
        if request.spec_path:
            renames[str(task_dir / "specs" / request.spec_path.name)] = str(request.spec_path)
        stderr, error_line = result.stderr, result.error_line
        for remote, driver in renames.items():
            stderr, error_line = stderr.replace(remote, driver), error_line.replace(remote, driver)
        result = replace(result, stderr=stderr, error_line=error_line, reproducer_path=None)
        return _CompiledFiles(result, binary, kept, dumps)
    finally:
        shutil.rmtree(task_dir, ignore_errors=True)


def _land(job: CompileJob, files: _CompiledFiles) -> CompileOutcome:
    """Write what a task made where the job's request says; return the job's outcome."""
    request = job.request
    request.output_path.parent.mkdir(parents=True, exist_ok=True)
    if files.binary is not None:
        request.output_path.write_bytes(files.binary)
    for index, relative, content in files.dumps:
        path = request.dumps[index][1] / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    result = files.result
    if files.reproducer is not None and request.reproducer_path is not None:
        request.reproducer_path.write_bytes(files.reproducer)
        result = replace(result, reproducer_path=request.reproducer_path)
    return record_outcome(job, result)


def _lost(job: CompileJob, error: Exception) -> CompileOutcome:
    """Record a compile Ray could not finish on any worker."""
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    reason = f"lost on the Ray cluster ({type(error).__name__}): {first}"
    job.log_path.write_text(reason + "\n" + str(error))
    return CompileOutcome(job.candidate_id, CompileStatus.FAILED, reason, "", 0.0)


class _MeasuringActor:
    """Measures on one device of its node: the ordinary worker processes, files from the driver.

    Ray pins a GPU actor to one GPU (it sets CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES), so
    the device is always the first one the actor sees.
    """

    def __init__(self) -> None:
        import ray

        # Named for the actor, which keeps its id across Ray's restarts: an incarnation that
        # replaces a dead one starts from an empty folder and leaves no second one behind.
        actor_id = ray.get_runtime_context().get_actor_id()
        self.folder = Path(tempfile.gettempdir()) / f"ireetune_ray_measure_{actor_id}"
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)

    def remove_files(self) -> None:
        """Remove what was shipped to this actor (the executor calls it before letting it go)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _file(self, name: str, digest: str, content: Any) -> str:
        import ray

        path = self.folder / digest / name
        if not path.exists():
            write_bytes_once(path, ray.get(content))
        return str(path)

    def run_benchmarks(
        self,
        shipped: list[
            tuple[int, tuple[str, str, Any], tuple[str, str, Any] | None, str, int, bool]
        ],
        session: BenchmarkSession, fault_hook: str,
    ) -> Iterator[BenchmarkOutcome]:  # fmt: skip
        """Run the session (shipped without its jobs) over the shipped jobs."""
        from ireetune.benchmark.runner import run_benchmarks_here

        jobs = [
            BenchmarkJob(
                candidate_id,
                Path(self._file(*binary)),
                Path(self._file(*inputs)) if inputs is not None else None,
                function,
                batch,
                early_stop,
            )
            for candidate_id, binary, inputs, function, batch, early_stop in shipped
        ]
        here = replace(session, jobs=jobs, device=_local_device(session.device))
        for outcome in run_benchmarks_here(here):
            _maybe_kill_self(fault_hook, "measure", outcome.candidate_id)
            yield outcome

    def run_reference_programs(
        self,
        shipped: list[tuple[int, tuple[str, str, Any]]],
        inputs: tuple[str, str, Any],
        batch: ReferenceBatch,
    ) -> dict[int, ReferenceRun]:
        """Run the batch (shipped without its jobs and inputs) over the shipped binaries."""
        from ireetune.verify.runner import run_reference_programs_here

        work = Path(tempfile.mkdtemp(dir=self.folder))
        jobs = [
            (cid, Path(self._file(*binary)), work / f"{cid}_output.npy") for cid, binary in shipped
        ]
        try:
            here = replace(
                batch,
                jobs=jobs,
                device=_local_device(batch.device),
                inputs_path=Path(self._file(*inputs)),
            )
            return run_reference_programs_here(here)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def run_models_side_by_side(
        self,
        shipped: list[tuple[str, tuple[str, str, Any]]],
        inputs: tuple[str, str, Any],
        parameters: Sequence[tuple[str, str, Any]],
        comparison: ModelComparison,
    ) -> dict[str, ModelRun]:
        """Time the comparison (shipped without its files) over the shipped binaries, inputs
        and parameter archives, in a work folder of this actor."""
        from ireetune.model.timing import run_models_side_by_side_here

        work = Path(tempfile.mkdtemp(dir=self.folder))
        models = [(model_id, Path(self._file(*binary))) for model_id, binary in shipped]
        try:
            return run_models_side_by_side_here(
                replace(
                    comparison, models=models, inputs_path=Path(self._file(*inputs)),
                    work_dir=work, device=_local_device(comparison.device),
                    parameters=[Path(self._file(*p)) for p in parameters],
                )
            )  # fmt: skip
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def node_pid(self) -> tuple[str, int]:
        """Return this actor's node address and process id (for diagnostics and fault tests)."""
        import ray

        return ray.util.get_node_ip_address(), os.getpid()


def _local_device(device: str) -> str:
    """Name the device inside a GPU actor: Ray shows it exactly one GPU, its first."""
    match = _GPU_DEVICE.match(device)
    return f"{match.group(1)}://0" if match else device


class RayExecutor(Executor):
    """Compile tasks and measuring actors on a Ray cluster; the driver keeps every result."""

    def __init__(self, settings: RaySettings) -> None:
        self.ray = import_ray()
        self.settings = settings
        if not self.ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if settings.address:
                options["address"] = settings.address
            elif settings.num_cpus:
                options["num_cpus"] = settings.num_cpus
            try:
                self.ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise IreetuneError(
                    f"cannot reach the Ray cluster at {settings.address or 'a new local one'}: "
                    f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
                ) from error
            self._owns_connection = True
        else:
            self._owns_connection = False
        compile_options: dict[str, Any] = {
            "num_cpus": 1,
            "max_retries": settings.compile_retries,
            "runtime_env": _NORMAL_PRIORITY,
        }
        if settings.compile_resource:
            compile_options["resources"] = {settings.compile_resource: 1}
        self._compile_task = self.ray.remote(compile_shipped).options(**compile_options)
        self._actors: dict[str, Any] = {}
        self._actors_lock = threading.Lock()
        self._shipped_files: dict[tuple[str, int, int], tuple[str, str, Any]] = {}

    @property
    def name(self) -> str:
        return "ray"

    def close(self) -> None:
        actors = list(self._actors.values())
        try:
            # The binaries and inputs shipped to each actor go with the run.
            self.ray.get([actor.remove_files.remote() for actor in actors], timeout=_CLOSE_WAIT_S)
        except self.ray.exceptions.RayError as error:
            logger.warning("a measuring actor kept its files: %s", error)
        for actor in actors:
            self.ray.kill(actor)
        self._actors.clear()
        self._shipped_files.clear()
        if self._owns_connection:
            self.ray.shutdown()

    # Compiling.

    def compile(self, batch: CompileBatch) -> Iterator[CompileOutcome]:
        ray = self.ray
        hook = os.environ.get(FAULT_VARIABLE, "")
        sources: dict[Path, Any] = {}
        pending: dict[Any, CompileJob] = {}
        for job in batch.jobs:
            request = replace(job.request, timeout_s=batch.timeout_s)
            if request.source_path not in sources:
                sources[request.source_path] = ray.put(request.source_path.read_bytes())
            spec = request.spec_path.read_bytes() if request.spec_path is not None else None
            # The source travels once per distinct file: its reference, resolved by Ray.
            shipped = _ShippedCompile(request, spec, hook, read_flag_files(request))
            reference = self._compile_task.remote(shipped, sources[request.source_path])
            pending[reference] = job
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
                for reference in done:
                    job = pending.pop(reference)
                    try:
                        files = ray.get(reference)
                    except (ray.exceptions.RayError, OSError) as error:
                        logger.warning("compile of candidate %d lost: %s", job.candidate_id, error)
                        yield _lost(job, error)
                        continue
                    yield _land(job, files)
        finally:
            # Interrupted (or the caller stopped reading): queue no more, stop the running ones.
            for reference in pending:
                ray.cancel(reference, force=True)

    # Measuring.

    def _actor(self, device: str) -> Any:
        """Return the measuring actor of a device label, starting it on first use."""
        with self._actors_lock:
            if device not in self._actors:
                options: dict[str, Any] = {
                    "max_restarts": _MEASURE_ATTEMPTS,
                    "max_concurrency": 1,
                    "runtime_env": _NORMAL_PRIORITY,
                }
                if _GPU_DEVICE.match(device):
                    options["num_gpus"] = 1
                else:
                    # The CPU device is the node's cores: the actor reserves none, since compiles
                    # and measurements of a run never overlap and a reserved core would idle.
                    options["num_cpus"] = 0
                if self.settings.device_resource:
                    options["resources"] = {self.settings.device_resource: 1}
                actor_class = self.ray.remote(_MeasuringActor)
                self._actors[device] = actor_class.options(**options).remote()
            return self._actors[device]

    def _wait_until_restarted(self, device: str) -> None:
        """Wait while Ray restarts a device's actor (calls meanwhile fail at once as unavailable),
        up to `_RESTART_WAIT_S`; return early if it died for good."""
        ray = self.ray
        deadline = time.monotonic() + _RESTART_WAIT_S
        while time.monotonic() < deadline:
            try:
                ray.get(self._actor(device).node_pid.remote(), timeout=_RESTART_WAIT_S)
                return
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.5)
            except ray.exceptions.RayError:
                return

    def _ship(self, path: Path) -> tuple[str, str, Any]:
        """Put a file in the object store once per content; return (name, digest, reference)."""
        status = path.stat()
        key = (str(path.absolute()), status.st_size, status.st_mtime_ns)
        if key not in self._shipped_files:
            content = path.read_bytes()
            digest = hashlib.sha256(content).hexdigest()[:20]
            self._shipped_files[key] = (path.name, digest, self.ray.put(content))
        return self._shipped_files[key]

    def run_benchmarks(self, session: BenchmarkSession) -> Generator[BenchmarkOutcome, None, None]:
        # The measuring actor runs the local session (run_benchmarks_here) over the jobs known
        # when it is called. A session's feed grows while it runs (the campaign adds candidates
        # as they compile and the confirmation rounds once the first pass is in), and a feed
        # cannot be shipped: the jobs go over in chunks, each chunk one session in the actor
        # (a fresh worker per chunk, so binaries stay loaded only within one). What the baseline
        # taught the first chunk is passed to the later ones.
        jobs = session.jobs
        feed = jobs if isinstance(jobs, JobFeed) else JobFeed(jobs, closed=True)
        # The session travels without its jobs (a feed cannot be pickled); they go as files.
        rest = replace(session, jobs=())
        reported = 0
        while True:
            chunk = _available(feed, reported)
            if not chunk:
                return
            for outcome in self._run_chunk(chunk, rest, first=reported == 0):
                if reported == 0 and rest.timeout_after_first is not None:
                    rest = _learned(rest, outcome)
                reported += 1
                yield outcome

    def _run_chunk(
        self, jobs: Sequence[BenchmarkJob], session: BenchmarkSession, first: bool
    ) -> Iterator[BenchmarkOutcome]:
        """Time `jobs` in the device's actor; resend what is left when the actor is lost."""
        ray = self.ray
        device = session.device
        reported = 0
        lost: Exception | None = None
        for attempt in range(_MEASURE_ATTEMPTS):
            pending = jobs[reported:]
            shipped = [
                (
                    job.candidate_id,
                    self._ship(job.vmfb_path),
                    self._ship(job.inputs_path) if job.inputs_path is not None else None,
                    job.function,
                    job.batch,
                    job.early_stop,
                )
                for job in pending
            ]
            stream = self._actor(device).run_benchmarks.remote(
                shipped, session, os.environ.get(FAULT_VARIABLE, "")
            )
            try:
                for reference in stream:
                    outcome = replace(ray.get(reference), device=device)
                    if first and reported == 0 and session.timeout_after_first is not None:
                        session = _learned(session, outcome)
                    reported += 1
                    yield outcome
                return
            except ray.exceptions.RayError as error:
                logger.warning("measuring actor of %s lost (attempt %d): %s", device, attempt + 1, error)  # fmt: skip
                lost = error
                self._wait_until_restarted(device)
        for job in jobs[reported:]:
            yield BenchmarkOutcome(
                job.candidate_id, BenchmarkStatus.CRASHED,
                f"measuring actor lost on the Ray cluster: {type(lost).__name__}", (), 0, False, device,
            )  # fmt: skip

    def run_reference_programs(self, batch: ReferenceBatch) -> dict[int, ReferenceRun]:
        if not batch.jobs:
            return {}
        shipped = [(cid, self._ship(binary)) for cid, binary, _ in batch.jobs]
        try:
            runs: dict[int, ReferenceRun] = self.ray.get(
                self._actor(batch.device).run_reference_programs.remote(
                    shipped, self._ship(batch.inputs_path), replace(batch, jobs=())
                )
            )
        except self.ray.exceptions.RayError as error:
            reason = f"measuring actor lost on the Ray cluster: {type(error).__name__}"
            return {cid: ReferenceRun(None, None, reason) for cid, _, _ in batch.jobs}
        # Where the local runner leaves each output, so a caller finds the same files.
        import numpy as np

        for cid, _, output_path in batch.jobs:
            output = runs[cid].output
            if output is not None:
                np.save(output_path, output)
        return runs

    def run_models_side_by_side(self, comparison: ModelComparison) -> dict[str, ModelRun]:
        shipped = [(model_id, self._ship(path)) for model_id, path in comparison.models]
        try:
            runs: dict[str, ModelRun] = self.ray.get(
                self._actor(comparison.device).run_models_side_by_side.remote(
                    shipped, self._ship(comparison.inputs_path),
                    [self._ship(path) for path in comparison.parameters],
                    replace(comparison, models=(), parameters=()),
                )
            )  # fmt: skip
        except self.ray.exceptions.RayError as error:
            raise IreetuneError(
                f"timing the model failed: the measuring actor was lost ({type(error).__name__})"
            ) from error
        return runs


def _available(feed: JobFeed, start: int) -> list[BenchmarkJob]:
    """Wait for job `start` of the feed; return it and every job after it known now (empty once
    the feed closed before it)."""
    jobs: list[BenchmarkJob] = []
    while True:
        job = feed.wait_for(start + len(jobs), None if not jobs else 0)
        if not isinstance(job, BenchmarkJob):
            return jobs
        jobs.append(job)


def _learned(session: BenchmarkSession, first: BenchmarkOutcome) -> BenchmarkSession:
    """Return the session a later or resent call needs once the baseline (the first job) was
    measured: its (screened) batch, early-stop threshold and phase deadlines, as the local
    session keeps them."""
    if first.status is not BenchmarkStatus.MEASURED:
        return session
    import statistics

    assert session.timeout_after_first is not None
    factor = session.hopeless_factor
    return replace(
        session,
        batch=max(1, int(first.batch * session.screen_fraction)),
        deadlines=session.timeout_after_first(first),
        hopeless_ms=factor * statistics.median(first.times_ms) if factor else None,
        timeout_after_first=None,
    )
