"""The one progress facility: a rich progress bar on stderr, silent when not on a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

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


class StageProgress:
    """Show one bar per stage; `advance` moves the bar of the running stage."""

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

    @contextlib.contextmanager
    def stage(self, description: str, total: int) -> Iterator[None]:
        self._task = self._progress.add_task(description, total=total)
        try:
            yield
        finally:
            self._progress.update(self._task, completed=total)
            self._task = None

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)

    def __enter__(self) -> StageProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)


def progress_enabled(requested: bool | None) -> bool:
    """Show progress when asked, or by default when stderr is a terminal."""
    return sys.stderr.isatty() if requested is None else requested
