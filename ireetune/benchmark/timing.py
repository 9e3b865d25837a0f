"""How a measurement's time was taken, recorded beside every timing (runtime-only)."""

from __future__ import annotations

import enum


class TimingKind(enum.Enum):
    """The clock and the unit a time was measured with.

    IREE 3.13's Python runtime offers no device-side timestamps (and the CUDA driver does not
    implement its dispatch statistics), so every clock is the host's; what differs is how many
    dispatches one timed call holds, and so how much launch and wait overhead each time carries.
    """

    # One dispatch per timed call: the time includes one launch and one wait. For a dispatch of
    # a few microseconds this measures mostly overhead.
    HOST = "host"
    # `batch` dispatches inside one call (the dispatch benchmark's repeat count), divided by the
    # batch: the launch and the wait are paid once per batch, so tiny dispatches time honestly.
    BATCHED = "batched"
    # A program called `batch` times on real inputs: every call pays its own launch and wait.
    HOST_PER_CALL = "host-per-call"

    def describe(self, batch: str) -> str:
        """Say in words how the time was taken (for the summary); `batch` as "16" or "4-16"."""
        if self is TimingKind.BATCHED:
            return f"host clock over batches of {batch} dispatches in one call (launch amortised)"
        if self is TimingKind.HOST_PER_CALL:
            return "host clock per program call on real inputs (each call pays its launch)"
        return "host clock per call of one dispatch (includes launch and wait)"
