"""The flag phase of a dispatch run: the global compiler flags every later compile carries.

`choose_global_flags` checks the user's `--flags` and, with `--search-flags`, searches the
target's flag space on the dispatch (flags/dispatch_search.py); `attach_flag_search` records that
search in the finished run's results and summary.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ireetune.compile.pool import default_jobs
from ireetune.core.files import write_text_atomically
from ireetune.core.run_dir import create_run_dir
from ireetune.core.target import Target
from ireetune.executor import Executor
from ireetune.flags.check import check_flags_with_compiler
from ireetune.flags.dispatch_search import DispatchFlagSearch, search_flags_for_input
from ireetune.flags.trials import FlagSearchResult, trial_row
from ireetune.flows.dispatch.options import TuneOptions
from ireetune.flows.dispatch.state import campaign_settings
from ireetune.report.result import TuneResult
from ireetune.targets import parse_target


def choose_global_flags(
    options: TuneOptions, executor: Executor
) -> tuple[Target, FlagSearchResult | None]:
    """Return the run's target carrying every global flag, and the flag search if one ran."""
    target = parse_target(options.target, options.pipelines).with_global_flags(options.extra_flags)
    check_flags_with_compiler(options.extra_flags, target, "--flags")
    if not options.search_flags:
        return target, None
    output_existed = options.output_dir.exists()
    flags_dir = create_run_dir(options.output_dir, f"flags_{options.input_path.stem}")
    try:
        flag_search = search_flags_for_input(
            executor, options.input_path,
            DispatchFlagSearch(
                target, options.threshold, campaign_settings(options),
                options.jobs or default_jobs(), options.compile_timeout_s, options.seed,
                options.model_level_rounds,
            ),
            flags_dir,
        )  # fmt: skip
    except BaseException:
        # A search refused before it wrote anything (inputs no one can make) leaves no folder.
        if not any(flags_dir.iterdir()):
            flags_dir.rmdir()
            if not output_existed and not any(options.output_dir.iterdir()):
                options.output_dir.rmdir()
        raise
    target = target.with_global_flags((*options.extra_flags, *flag_search.winner.flags))
    return target, flag_search


def attach_flag_search(result: TuneResult, flag_search: FlagSearchResult | None) -> TuneResult:
    """Record the flag search that chose the run's global flags in its results and summary."""
    if flag_search is None:
        return result
    verdict = (
        f"kept {flag_search.winner.label}: {flag_search.estimate.describe()} over default flags"
        if flag_search.estimate is not None
        else "no flag set beat the default flags by the rule; defaults kept"
    )
    line = f"flag search: {verdict} (trials: {flag_search.trials_path})"
    results_path = result.run_dir / "results.json"
    if results_path.exists():
        data = json.loads(results_path.read_text())
        data["flag_search"] = {
            "winner": list(flag_search.winner.flags), "rule": flag_search.rule.name,
            "trials_file": str(flag_search.trials_path),
            "trials": [trial_row(t) for t in flag_search.trials],
        }  # fmt: skip
        write_text_atomically(results_path, json.dumps(data, indent=2) + "\n")
    summary = result.summary + line + "\n"
    write_text_atomically(result.run_dir / "summary.txt", summary)
    return replace(result, notes=(*result.notes, line), summary=summary)
