"""The worker's timing loop: when a candidate is stopped as hopeless."""

from __future__ import annotations

import time

from ireetune.benchmark.worker import time_function


class _Kernel:
    """A benchmark function whose calls take the planned times (ms a dispatch), the last one
    for every call after the plan."""

    def __init__(self, *planned_ms: float) -> None:
        self.planned_ms = list(planned_ms)

    def __call__(self, count: int) -> None:
        ms = self.planned_ms.pop(0) if len(self.planned_ms) > 1 else self.planned_ms[0]
        time.sleep(ms * count / 1000.0)


def test_one_stalled_call_does_not_stop_a_candidate_as_hopeless() -> None:
    # The probe call stalls (40 ms); every later call takes 2 ms, under the 10 ms threshold.
    times_ms, stopped_early, batch = time_function(_Kernel(40.0, 2.0), 4, 3, hopeless_ms=10.0)
    assert not stopped_early
    assert batch == 4 and len(times_ms) == 3
    assert max(times_ms) < 10.0


def test_a_candidate_slow_in_two_calls_is_stopped_after_one_dispatch() -> None:
    times_ms, stopped_early, batch = time_function(_Kernel(40.0), 4, 3, hopeless_ms=10.0)
    assert stopped_early
    assert batch == 1 and len(times_ms) == 1 and times_ms[0] >= 40.0
