"""Finish a measured dispatch folder: compile the leaders' reference programs where the folder
deferred them, else fold the results in and decide.

`tune-dispatch --stop-after compile` (References.LEADERS) compiles each candidate once: its
dispatch benchmark. The device host measures (`ireetune measure`), chooses the leaders and lists
them as pending; `ireetune continue` then compiles just their reference programs
(and the default's) here, writes verify/references.json and pauses the run, and the device host
checks their outputs on a second call. Where none wait, the run goes on to its verdict
(flows/handoff/finish.py).
"""

from __future__ import annotations

from pathlib import Path

from ireetune.compile.pool import CompileBatch, default_jobs
from ireetune.core.errors import IreetuneError
from ireetune.database.run_files import (
    dump_document,
    read_json_file,
)
from ireetune.flows.dispatch.decide import decide_stage
from ireetune.flows.handoff.finish import (
    FinishRun,
    fold_stage,
    load_finish_run,
    read_compiling_manifest,
    read_run_record,
)
from ireetune.flows.handoff.manifest import (
    REFERENCES_NAME,
    RESULTS_NAME,
    ReferencesFile,
    read_references,
)
from ireetune.flows.sequence import Pause, named, run_sequence
from ireetune.targets import parse_target
from ireetune.verify.stage import ReferenceSetup, compile_references, reference_jobs

REFERENCE_TIMEOUT_S = 300.0


def finish_measured_folder(run_dir: Path) -> FinishRun:
    """Read a measured dispatch folder back and run its compile-host stages: the references,
    where leaders wait for theirs (the run then pauses: `compiled_references` names them), else
    fold the results in and decide (the run's `result`). Nothing is written before the
    verdict: a folder refused on the way is left as it was."""
    finish = load_finish_run(run_dir)
    run_sequence(finish, named(references_stage, fold_stage, decide_stage), ())
    return finish


def references_stage(run: FinishRun) -> Pause | None:
    """`continue`'s first stage: compile the deferred reference programs of the leaders the
    device host named (`verification.pending`), and pause the run: the outputs are checked
    there before the run is decided. Nothing to do where none wait."""
    try:
        compiled = read_references(run.run_dir, run.manifest)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    waiting = [c for c in run.checked.verification.pending or () if c not in compiled]
    if waiting:
        compile_pending_references(run.run_dir, waiting)
        run.compiled_references = waiting
        # The folder's second trip to the device host: the first measured it.
        return Pause(round_trip=2)
    return None


def compile_pending_references(run_dir: Path, candidate_ids: list[int]) -> Path:
    """Compile the reference programs of `candidate_ids` with their specs; record them (with
    the binaries' hashes, or empty where a compile failed) in REFERENCES_NAME. They compile on
    this host (the local executor)."""
    from ireetune.executor.base import LocalExecutor

    manifest = read_compiling_manifest(run_dir)
    _, records = read_run_record(run_dir)
    unknown = [cid for cid in candidate_ids if cid not in records or not records[cid].spec_path]
    if unknown:
        raise IreetuneError(
            f"{run_dir / RESULTS_NAME}: verification.pending names candidates without a spec: "
            f"{', '.join(map(str, unknown))}"
        )
    target = parse_target(manifest.target).with_global_flags(manifest.global_flags)
    verify_dir = run_dir / "verify"
    setup = ReferenceSetup(verify_dir / "reference.mlir", verify_dir / "inputs.npz")
    jobs = reference_jobs(
        target, setup, {cid: run_dir / records[cid].spec_path for cid in candidate_ids},
        verify_dir, run_dir / "failures",
    )  # fmt: skip
    built = compile_references(
        LocalExecutor(), CompileBatch(jobs, default_jobs(), REFERENCE_TIMEOUT_S)
    )
    path = run_dir / REFERENCES_NAME
    try:
        # Checks the file's fields (a folder that defers its references), then extends it.
        read_references(run_dir, manifest)
    except ValueError as error:
        raise IreetuneError(str(error)) from None
    known = read_json_file(path)["references"] if path.exists() else []
    entries = {int(entry["candidate_id"]): entry for entry in known}
    for candidate_id, (binary, detail) in built.items():
        entries[candidate_id] = {
            "candidate_id": candidate_id,
            "vmfb": str(binary.relative_to(run_dir)) if binary is not None else "",
            "hash": detail if binary is not None else "",
        }
    document = {
        "format": ReferencesFile.FORMAT,
        "references": [entries[c] for c in sorted(entries)],
    }
    path.write_text(dump_document(ReferencesFile, document))
    return path
