"""Which import of an ONNX model an in-process run tunes: the model as given, or the rewritten
("split") import, with each grouped convolution split per group (frontend/onnx_groups.py) and
each strided convolution of few input channels as a space-to-depth and a stride-1 convolution
(frontend/onnx_space_to_depth.py; not under the im2col flag, which makes it a matrix product
already).

Without `--split-grouped-convs` or `--no-split-grouped-convs`, the end of the flag phase imports
the model split too, compiles it with the flag phase's winner, and times it side by side with the
winner's binary of the model as given; the run tunes the split import from then on only when its
outputs equal the model's and the model rule's threshold lies below its whole interval. Both are
judged under the same flags because the flags change the answer: at default flags ShuffleNet's
split import ran 1.71x faster, and under the tuned flags (data tiling turns its grouped 1x1
convolutions into batch matmuls) the model as given ran about 1.46x faster than the split one
tuned on its own (docs/benchmarks.md, 2026-12-06). A split mode run keeps the model as given
unless told: the compile host cannot time the two. The report still calls the rewritten import
"the split import", and `--split-grouped-convs` forces (or `--no-` refuses) both rewrites.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ireetune.core.errors import IreetuneError
from ireetune.decision.stats import Basis, SpeedupEstimate, estimate_speedup, split_rounds
from ireetune.decision.thresholds import MODEL_THRESHOLD
from ireetune.flows.model.run import Mode, ModelTuningRun
from ireetune.flows.model.state import SPLIT_DIR
from ireetune.frontend.model_import import (
    TUNED_IMPORT,
    count_rewrites,
    describe_rewrites,
    import_model,
)
from ireetune.model.outputs import outputs_match
from ireetune.model.prepare import ModelUnderTuning, prepare_model_source
from ireetune.model.timing import ModelComparison, ModelRun, fastest_round_ms

# Under this flag every convolution is a matrix product already: the space-to-depth rewrite of
# a strided convolution gains nothing there (frontend/onnx_space_to_depth.py).
IM2COL_FLAG = "--iree-global-opt-use-im2col-for-convs"

# The two imports are timed side by side in at least this many rounds of this many calls.
CHOICE_ROUNDS = 6
CHOICE_REPETITIONS = 3


def split_binary(run_dir: Path) -> Path:
    """Return where a run keeps the split import's binary at the flags it was judged under."""
    return run_dir / SPLIT_DIR / "model.vmfb"


def choose_import(run: ModelTuningRun) -> None:
    """In process, without the option either way: tune the model's rewritten import (its grouped
    convolutions split, its strided convolutions of few channels as space-to-depth) when it runs
    faster than the model as given under the flag phase's
    winner (or the default flags), outputs equal; the run's notes say what was measured."""
    options = run.options
    if options.split_grouped_convs is not None or run.mode is Mode.SPLIT:
        return
    count, strided = count_rewrites(options.model_path)
    space_to_depth = IM2COL_FLAG not in run.target.global_flags
    strided = strided if space_to_depth else 0
    if not (count or strided) or run.default_vmfb is None:
        return
    work_dir, model = run.run_dir / SPLIT_DIR, run.under_tuning
    split_vmfb = split_binary(run.run_dir)
    try:
        mlir_path = import_model(
            options.model_path, work_dir, split_groups=True, space_to_depth=space_to_depth
        )
        source, _, _ = prepare_model_source(mlir_path, model.function, options.inputs, work_dir)
    except IreetuneError as error:
        run.notes.append(f"{describe_rewrites(count, strided)}: not rewritten: {error}")
        return
    split = ModelUnderTuning(
        source, model.function, model.inputs_path, run.target, options.with_default_specs,
        model.device, model.default_outputs, model.compile_timeout_s,
    )  # fmt: skip
    failure = split.compile(None, split_vmfb)
    if failure:
        run.notes.append(
            f"{describe_rewrites(count, strided)}: not rewritten: the split import {failure}"
        )
        shutil.rmtree(work_dir, ignore_errors=True)
        return
    runtime_flags = run.flag_search.runtime_flags if run.flag_search is not None else ()
    timed = run.executor.run_models_side_by_side(
        ModelComparison(
            [("as_given", run.default_vmfb), ("groups_split", split_vmfb)], model.function,
            model.inputs_path, work_dir, model.device, max(options.rounds, CHOICE_ROUNDS),
            CHOICE_REPETITIONS, runtime_flags=runtime_flags,
        )
    )  # fmt: skip
    flags = run.default_vmfb != run.original_vmfb
    kept, note = judge_split_import(timed["as_given"], timed["groups_split"], count, flags, strided)
    run.notes.append(note)
    if kept is None:
        shutil.rmtree(work_dir, ignore_errors=True)
        return
    # The later phases compile and time the split import under the same flags: its binary is
    # the run's default from now on (model_run.json names it for a continued run). The flag
    # winner's binary stays as the flag phase built it, the one flags/trials.json hashes.
    run.default_vmfb = split_vmfb
    run.default_ms = fastest_round_ms(timed["groups_split"].times_ms, CHOICE_REPETITIONS)
    run.model, run.import_estimate = split, kept


def judge_split_import(
    whole: ModelRun, split: ModelRun, count: int, tuned_flags: bool, strided: int = 0
) -> tuple[SpeedupEstimate | None, str]:
    """Judge the import with `count` grouped convolutions split and `strided` convolutions as
    space-to-depth (`split`) against the model as
    given (`whole`), both timed side by side in rounds of CHOICE_REPETITIONS calls under the flag
    phase's winner (`tuned_flags`) or the default flags: the split import's speedup when it is
    to be tuned (None: the model as given), and the note that says why."""
    what = describe_rewrites(count, strided)
    at = "under the tuned flags" if tuned_flags else "at default flags"
    if not whole.ok or not split.ok:
        failed = "the model as given" if not whole.ok else "the split import"
        reason = whole.reason or split.reason
        return None, f"{what}: {failed} did not run {at} ({reason}); tuned as given"
    same, why = outputs_match(whole.outputs, split.outputs)
    if not same:
        return None, f"{what}: the split import's outputs differ ({why}); tuned as given"
    estimate = estimate_speedup(
        split_rounds(whole.times_ms, CHOICE_REPETITIONS),
        split_rounds(split.times_ms, CHOICE_REPETITIONS),
        Basis.MODEL,
    )  # fmt: skip
    if estimate is None or estimate.low <= MODEL_THRESHOLD:
        figure = "not timed" if estimate is None else f"{estimate.describe()} {at}"
        return None, (
            f"{what}: not faster than the model as given ({figure}); tuned as given "
            "(--split-grouped-convs forces the rewritten import)"
        )
    return estimate, (
        f"{what} at import: {estimate.describe()} faster than the model as given {at}, outputs "
        f"equal (--no-split-grouped-convs keeps them whole); {TUNED_IMPORT}"
    )
