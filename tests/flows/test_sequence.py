"""The one stage sequencer of every run (flows/sequence.py): stages in order, callbacks after
each, a stage that pauses for the device host stops the run after its callbacks."""

from __future__ import annotations

import pytest

from ireetune.flows.sequence import Pause, named, run_sequence


def test_the_sequencer_calls_every_callback_after_every_stage_in_order() -> None:
    seen: list[str] = []

    def generate(run: list[str]) -> None:
        run.append("generate ran")

    def compile_all(run: list[str]) -> None:
        run.append("compile ran")

    run_sequence(
        seen,
        named(generate, compile_all),
        (lambda run, stage: run.append(f"save after {stage}"),
         lambda run, stage: run.append(f"log after {stage}")),
    )  # fmt: skip

    assert seen == [
        "generate ran", "save after generate", "log after generate",
        "compile ran", "save after compile_all", "log after compile_all",
    ]  # fmt: skip


def test_a_stage_that_raises_ends_the_run_before_its_callbacks() -> None:
    seen: list[str] = []

    def measure(run: list[str]) -> None:
        raise RuntimeError("device lost")

    def decide(run: list[str]) -> None:
        run.append("decide ran")

    with pytest.raises(RuntimeError) as excinfo:
        run_sequence(seen, named(measure, decide), (lambda run, stage: run.append(stage),))

    assert str(excinfo.value) == "device lost"
    assert seen == []


def test_a_stage_that_pauses_for_the_device_stops_the_run_after_its_callbacks() -> None:
    seen: list[str] = []

    def compile_all(run: list[str]) -> None:
        run.append("compile ran")

    def wait_for_device(run: list[str]) -> Pause | None:
        run.append("manifest written")
        return Pause(2)

    def decide(run: list[str]) -> None:
        run.append("decide ran")

    pause = run_sequence(
        seen, named(compile_all, wait_for_device, decide), (lambda run, stage: run.append(stage),)
    )

    assert pause == Pause(2)
    assert seen == ["compile ran", "compile_all", "manifest written", "wait_for_device"]
