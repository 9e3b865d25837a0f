"""The CPU space for copies on buffers (a pad's copy of its input into the padded buffer, IREE's
`..._slow_memcpy` dispatch): the padded buffer read back from the window's layout, a structured
matcher that lands a neighbour of the default in the whole model and reads back, and a real
`tune-dispatch` whose reference program (the pad) takes each candidate's configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.target import space_for
from ireetune.problem.buffer_copy import BufferCopyProblem, Padding, window_padding
from ireetune.spec.builder import build_configuration_spec
from ireetune.spec.inspect import list_matchers
from ireetune.spec.source import parse_spec
from ireetune.targets import parse_target
from ireetune.targets.llvm_cpu.elementwise_space import CpuBufferCopySpace, elementwise_tile_lists
from tests.conftest import FAST_RUN_ARGS, TEST_CPU, TEST_TARGET, dump_benchmarks
from tests.landing_support import compile_model_with_candidate, find_family_requests
from tests.targets.llvm_cpu.test_cpu_spec_reach import PAD_MODEL


@pytest.mark.parametrize(
    ("source", "window", "expected"),
    [
        # The 7x7 convolution's input, padded by 3 on each side of its rows and columns.
        (
            "memref<3x32x32xf32>",
            "memref<3x32x32xf32, strided<[1444, 38, 1], offset: 117>>",
            Padding((3, 38, 38), (0, 3, 3)),
        ),
        # Padded on the channels too (one before), and unevenly on the columns.
        (
            "memref<2x4x5xf16>",
            "memref<2x4x5xf16, strided<[42, 7, 1], offset: 50>>",
            Padding((3, 6, 7), (1, 1, 1)),
        ),
        # In a model's dispatch both lie at a binding's dynamic offset (GoogLeNet's pool input,
        # padded by 1): the source is whole by its strides, the padding read as even.
        (
            "memref<512x13x13xf32, strided<[169, 13, 1], offset: ?>>",
            "memref<512x13x13xf32, strided<[225, 15, 1], offset: ?>>",
            Padding((512, 15, 15), (0, 1, 1)),
        ),
        # A window of no padded row-major buffer (its columns' stride is not 1), a source that
        # is a window itself, a whole buffer: no pad to write.
        ("memref<3x4xf32>", "memref<3x4xf32, strided<[8, 2]>>", None),
        ("memref<3x4xf32, strided<[8, 1]>>", "memref<3x4xf32, strided<[8, 1], offset: 9>>", None),
        ("memref<3x4xf32>", "memref<3x4xf32>", None),
    ],
)
def test_the_padded_buffer_is_read_back_from_the_window(
    source: str, window: str, expected: Padding | None
) -> None:
    with ir.Context():
        assert window_padding(ir.Type.parse(source), ir.Type.parse(window)) == expected


def test_a_copy_on_buffers_lands_a_neighbour_of_the_default_in_the_whole_model(
    tmp_path: Path,
) -> None:
    (request,) = find_family_requests(PAD_MODEL, tmp_path / "dump", "buffer_copy", TEST_CPU)
    problem = request.problem
    assert isinstance(problem, BufferCopyProblem) and request.default_knobs is not None
    assert problem.signature == "buffer_copy_3x32x32_f32"
    space = space_for(parse_target(TEST_TARGET), problem)
    assert isinstance(space, CpuBufferCopySpace)
    knobs = next(space.generate(request))
    # The first candidate is a neighbour of the default: one knob moved.
    assert len(set(knobs) - set(request.default_knobs)) == 1, (knobs, request.default_knobs)
    report = compile_model_with_candidate(
        tmp_path / "dump" / "model.mlir", problem, knobs, tmp_path
    )
    (landed,) = report.checks
    tiles = elementwise_tile_lists(problem, knobs)
    assert landed.landed, landed
    assert landed.found == (
        f"#iree_cpu.lowering_config<distribution = {tiles['distribution']}, "
        f"vector_common_parallel = {tiles['vector_common_parallel']}>"
    )


def test_a_copy_matcher_is_structured_and_reads_back(tmp_path: Path) -> None:
    (request,) = find_family_requests(PAD_MODEL, tmp_path / "dump", "buffer_copy", TEST_CPU)
    problem = request.problem
    context = ir.Context()
    configuration = space_for(parse_target(TEST_TARGET), problem).configuration(
        problem, request.default_knobs or (), context
    )
    text = build_configuration_spec(problem, configuration, (), context)
    assert "transform.match.structured failures(propagate)" in text, text
    assert "transform.match.structured.body %arg1 passthrough" in text, text
    (matcher,) = list_matchers(parse_spec(text, "spec.mlir", context))
    assert (matcher.kind, matcher.conditions) == (
        "buffer_copy",
        ("copy on buffers, loops=[3, 32, 32], 32-bit elements",),
    )
    # A structured matcher of another form (a hand-written one, without the body check) is
    # no copy pattern.
    body_check = next(line for line in text.splitlines() if "passthrough" in line)
    (other,) = list_matchers(parse_spec(text.replace(body_check + "\n", ""), "spec.mlir", context))
    assert other.kind != "buffer_copy", other


def test_tune_a_copy_on_buffers_on_the_cpu(tmp_path: Path) -> None:
    benchmarks = dump_benchmarks(PAD_MODEL, tmp_path / "dump", TEST_CPU)
    (copy,) = [b for b in benchmarks if "slow_memcpy" in b.read_text()]
    result = subprocess.run(
        [
            sys.executable, "-m", "ireetune.cli", "tune-dispatch", str(copy),
            "--target", TEST_TARGET, "--num-candidates", "3", "--output-dir", str(tmp_path / "out"),
            "--no-db", *FAST_RUN_ARGS,
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "problem: buffer_copy_3x32x32_f32" in result.stdout, result.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    candidates = json.loads((run_dir / "results.json").read_text())["candidates"]
    statuses = [c["status"] for c in candidates[1:]]
    # Every candidate's reference program (the pad) compiled to a binary of its own and was
    # timed: the pad's copy dispatch took each configuration.
    assert len(statuses) == 3 and set(statuses) <= {"measured", "verified"}, candidates
    hashes = [c["binary_hash"] for c in candidates]
    assert len(set(hashes)) == len(hashes), candidates
    assert "BufferOpsTileAndVectorize" in (run_dir / "specs" / "1_spec.mlir").read_text()
