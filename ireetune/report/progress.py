"""The one progress facility: a rich progress bar on stderr, silent when not on a terminal.

The same steps also go, as `ProgressEvent`s, to the callback a Python API call names
(`on_progress`, ireetune/api.py): `report_progress_to` sets it for the call, and every
`StageProgress` opened inside it tells it when a stage starts, advances and ends. The command
line sets none, so what it prints is the bar alone.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

STDERR = Console(stderr=True)


@dataclass(frozen=True)
class ProgressEvent:
    """A stage's progress: `completed` of its `total` steps done (0 when it starts, `total`
    when it ends), e.g. `ProgressEvent("compiling", 3, 8)`."""

    stage: str
    completed: int
    total: int


ProgressCallback = Callable[[ProgressEvent], None]
# The callback of the API call running in this context (None: the command line's bar only).
_CALLBACK: ContextVar[ProgressCallback | None] = ContextVar("ireetune_progress", default=None)


@contextlib.contextmanager
def report_progress_to(on_progress: ProgressCallback | None) -> Iterator[None]:
    """Send the progress of every stage run inside this block to `on_progress` as well."""
    token = _CALLBACK.set(on_progress)
    try:
        yield
    finally:
        _CALLBACK.reset(token)


class StageProgress:
    """Show one bar per stage; `advance` moves the bar of the running stage.

    The callback is the one set where the display opens: a stage's steps may advance from
    another thread (measuring while compiling), which does not share the context.
    """

    def __init__(self, enabled: bool) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=STDERR,
            disable=not enabled,
            transient=False,
        )
        self._task: TaskID | None = None
        self._callback = _CALLBACK.get()
        self._lock = threading.Lock()
        self._event: ProgressEvent | None = None

    @contextlib.contextmanager
    def stage(self, description: str, total: int) -> Iterator[None]:
        self._task = self._progress.add_task(description, total=total)
        self._tell(ProgressEvent(description, 0, total))
        try:
            yield
        finally:
            self._progress.update(self._task, completed=total)
            self._task = None
            with self._lock:
                if self._event is not None and self._event.completed != total:
                    self._tell(ProgressEvent(description, total, total))
                self._event = None

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)
        with self._lock:
            if self._event is not None:
                self._tell(replace(self._event, completed=self._event.completed + steps))

    def _tell(self, event: ProgressEvent) -> None:
        self._event = event
        if self._callback is not None:
            self._callback(event)

    def __enter__(self) -> StageProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)


def progress_enabled(requested: bool | None) -> bool:
    """Show progress when asked, or by default when stderr is a terminal."""
    return sys.stderr.isatty() if requested is None else requested
