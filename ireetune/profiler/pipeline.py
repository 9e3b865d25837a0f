"""Profile a sweep end to end: the API behind `ireetune profile`.

The compile phase (`build.py`, needs the compiler) and the run phase (`measure.py`, needs only
the runtime) meet at the manifest in the generated folder; `Phase.ALL` runs both here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ireetune.core.errors import IreetuneError
from ireetune.core.options import options_from
from ireetune.profiler.configs import compile_patterns, is_selected
from ireetune.profiler.manifest import Manifest, read_manifest
from ireetune.profiler.measure import MeasureOptions, measure_dispatches
from ireetune.profiler.operations import Operation
from ireetune.profiler.options import Phase, ProfileOptions
from ireetune.profiler.report import DispatchResult
from ireetune.verify.compare import check_inputs


@dataclass(frozen=True)
class ProfileResult:
    """The manifest of what was compiled and, unless only compiling, one result per dispatch."""

    manifest: Manifest
    results: tuple[DispatchResult, ...] = field(default_factory=tuple)


def run_profile(operations: Sequence[Operation], options: ProfileOptions) -> ProfileResult:
    """Compile the operations' dispatches and/or verify and profile them, as `options.phase` says.

    Everything runs on this host (the local executor).
    """
    from ireetune.executor.base import LocalExecutor

    executor = LocalExecutor()
    if options.phase is not Phase.RUN:
        if not operations:
            raise IreetuneError("the sweep is empty: nothing to profile")
        if options.phase is Phase.ALL and options.verify:
            # The check's inputs must fit before anything is compiled or written.
            for operation in operations:
                check_inputs(
                    [tuple(shape) for shape in operation.input_shapes],
                    [element_type.value for element_type in operation.input_types],
                    f"{operation.name}'s inputs",
                )
        from ireetune.profiler.build import BuildOptions, build_dispatches

        manifest = build_dispatches(executor, operations, options_from(BuildOptions, options))
        if not manifest.dispatches:
            raise IreetuneError("no dispatch matches --dispatches")
        if options.phase is Phase.COMPILE:
            return ProfileResult(manifest)
    else:
        manifest = _select(read_manifest(options.generated_dir), options.dispatch_patterns)
    measure_options = options_from(MeasureOptions, options, timeout_s=options.benchmark_timeout_s)
    results = measure_dispatches(executor, manifest, measure_options)
    return ProfileResult(manifest, tuple(results))


def _select(manifest: Manifest, pattern_texts: Sequence[str]) -> Manifest:
    """Keep the manifest's dispatches that `--dispatches` selects (run phase)."""
    patterns = compile_patterns(pattern_texts)
    kept = tuple(e for e in manifest.dispatches if is_selected(e.name, patterns))
    if not kept:
        raise IreetuneError("no dispatch of the manifest matches --dispatches")
    return Manifest(manifest.target, manifest.device, kept, manifest.notes)
