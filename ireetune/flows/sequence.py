"""The one stage sequencer of every run: dispatch runs and model runs.

A run is one object handed through its stages in order. Each stage is a function of the run that
may pause the run for the device host (it returns a `Pause`: the compile host has written what
the device must measure). After every stage, paused or not, every callback runs with the stage's
name (as TVM MetaSchedule's measure callbacks run after every batch): saving the run is a
callback, so a run that stops (killed, or paused for the device) is continued by loading it and
running the stages after the last one saved (`ireetune continue RUN_DIR`).

Where a run stands is one record, `RunProgress`: the stages done and the pause it waits at. The
save callback of each flow writes it, under the key `progress`, into the run's file
(results.json of a dispatch run, model_run.json of a model run), and every reader that
continues a run decides from it what comes next.

A stage's name is the name its flow records: a dispatch stage's function name (`compile_stage`),
a model phase (`Phase.PROFILE`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import Field

# The key under which both kinds of run file hold their `RunProgress`.
PROGRESS_KEY = "progress"


@dataclass(frozen=True)
class Pause:
    """Where a run stops for the device host: the round trip its manifest starts."""

    round_trip: Annotated[int, Field(ge=1)]


@dataclass(frozen=True)
class RunProgress:
    """Where a run stands: the stages done, each once, in the order they first finished, and
    the pause for the device host it waits at (None: it waits for nothing).

    A continued run that runs a stage again (a split model run runs every phase again, each
    keeping its own sub-steps; an online search runs its round stages again) does not record
    it twice. The pause stays while the compile host works through that round trip's results,
    until the run pauses again or ends.
    """

    done: tuple[str, ...] = ()
    pause: Pause | None = None

    @property
    def last(self) -> str | None:
        """The stage done last (None: none yet)."""
        return self.done[-1] if self.done else None

    def after(self, stage: str) -> RunProgress:
        """Return the record with `stage` done."""
        return self if stage in self.done else RunProgress((*self.done, stage), self.pause)

    def paused(self, pause: Pause | None) -> RunProgress:
        """Return the record waiting at `pause` (None: waiting for nothing)."""
        return RunProgress(self.done, pause)


RunT = TypeVar("RunT")
NameT = TypeVar("NameT", bound=str)
Stage = Callable[[RunT], Pause | None]


def named(*stages: Callable[[RunT], Pause | None]) -> tuple[tuple[str, Stage[RunT]], ...]:
    """Name each stage by its function's name."""
    return tuple((stage.__name__, stage) for stage in stages)


def run_sequence(
    run: RunT,
    stages: Iterable[tuple[NameT, Stage[RunT]]],
    callbacks: Sequence[Callable[[RunT, NameT], None]],
) -> Pause | None:
    """Run the stages in order, every callback after every stage; stop after the first stage
    that pauses for the device host (its callbacks have run: the run is saved) and return its
    pause. A stage that raises ends the run before its callbacks."""
    for name, stage in stages:
        pause = stage(run)
        for callback in callbacks:
            callback(run, name)
        if pause is not None:
            return pause
    return None
