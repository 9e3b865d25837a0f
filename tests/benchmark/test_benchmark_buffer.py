"""A model's dumped CPU dispatch benchmarks run on a zeroed buffer, not on the garbage the
compiler leaves in it (denormals: MobileNet-v2's 3136x24x144 matmul dispatch took 2.0 ms on it,
0.17 ms on data; docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ireetune.frontend.dispatches import dump_dispatches, zero_benchmark_buffer
from ireetune.targets import parse_target
from tests.conftest import MATMUL_MODEL, TEST_TARGET

IREE_BENCHMARK_MODULE = str(Path(sys.executable).parent / "iree-benchmark-module")
FILL = "hal.command_buffer.fill_buffer"


def test_a_dumped_cpu_benchmark_zeroes_its_buffer_once_and_runs(tmp_path: Path) -> None:
    model = tmp_path / "matmul.mlir"
    model.write_text(MATMUL_MODEL)
    dumped = dump_dispatches(model, parse_target(TEST_TARGET), tmp_path / "dispatches", 120)
    assert dumped
    for dispatch in dumped:
        text = dispatch.path.read_text()
        # In the initializer, right after the buffer's allocation (so not in the timed calls),
        # the whole buffer (the allocation's size) is filled with zeros.
        initializer = text[text.index("util.initializer") : text.index("util.return")]
        assert initializer.count(FILL) == 1 and text.count(FILL) == 1
        size = initializer.split("!hal.buffer{")[1].split("}")[0]
        assert f"[%zero_fill_offset, {size}]" in initializer
        # It compiles, and a call runs.
        binary = tmp_path / f"{dispatch.index}.vmfb"
        subprocess.run(
            [str(Path(sys.executable).parent / "iree-compile"), str(dispatch.path), "-o",
             str(binary)],
            check=True,
        )  # fmt: skip
        function = text.split("util.func public @")[1].split("(")[0]
        run = subprocess.run(
            [IREE_BENCHMARK_MODULE, f"--module={binary}", "--device=local-task",
             f"--function={function}", "--batch_size=1", "--benchmark_min_time=1x"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        assert "ERROR" not in run.stdout


def test_a_benchmark_of_another_form_is_left_as_it_is_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "util.initializer {\n  util.return\n}\n"
    assert zero_benchmark_buffer(text) == text
    twice = (
        "    %allocator = hal.device.allocator<%device : !hal.device> : !hal.allocator\n"
        + (
            "    %buffer = hal.allocator.allocate<%a : !hal.allocator> affinity(%q) type(%t) "
            "usage(%u) : !hal.buffer{%c64}\n"
        )
        * 2
    )
    assert zero_benchmark_buffer(twice) == twice
    assert sum("not zeroed" in r.getMessage() for r in caplog.records) == 2
