"""Executors: where compiles and measurements run: this host (`base.py`) or a Ray cluster
(`ray_executor.py`, its flag files in `flag_files.py`); `settings.py` declares the choice and the
Ray settings, and `open_executor` starts the chosen one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ireetune.executor.base import Executor, LocalExecutor
from ireetune.executor.settings import (
    ExecutorKind,
    RaySettings,
    add_executor_arguments,
    parse_executor,
)


@contextlib.contextmanager
def open_executor(kind: ExecutorKind, ray: RaySettings | None = None) -> Iterator[Executor]:
    """Start the chosen executor for a run (the flow hands it to its stages); close it after."""
    if kind is ExecutorKind.LOCAL:
        yield LocalExecutor()
        return
    from ireetune.executor.ray_executor import RayExecutor

    executor = RayExecutor(ray or RaySettings())
    try:
        yield executor
    finally:
        executor.close()


__all__ = [
    "Executor",
    "ExecutorKind",
    "LocalExecutor",
    "RaySettings",
    "add_executor_arguments",
    "open_executor",
    "parse_executor",
]
