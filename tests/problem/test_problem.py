"""Root-op discovery and contraction parsing on real dumped dispatches."""

from __future__ import annotations

from pathlib import Path

import pytest
from iree.compiler import ir

from ireetune.core.errors import IreetuneError
from ireetune.problem.contraction import ContractionProblem
from ireetune.problem.root_op import find_root_op, parse_problem
from tests.conftest import MATMUL_64X128X96


def _parse(path: Path) -> ContractionProblem:
    with ir.Context():
        module = ir.Module.parse(path.read_text())
        return parse_problem(find_root_op(module))


def test_matmul_is_parsed_into_a_typed_record(matmul_benchmark: Path) -> None:
    problem = _parse(matmul_benchmark)
    assert problem == MATMUL_64X128X96
    assert (problem.kind, problem.signature, problem.flops) == (
        "matmul",
        "matmul_64x128x96_f32_f32_f32",
        2 * 64 * 128 * 96,
    )


def test_transposed_rhs_matmul_is_an_mmt_with_mixed_types(mmt_benchmark: Path) -> None:
    problem = _parse(mmt_benchmark)
    assert (problem.kind, problem.signature) == ("mmt", "mmt_32x48x64_f16_f16_f32")
    assert problem.indexing_maps[1] == "(d0, d1, d2) -> (d1, d2)"


def test_batch_matmul_has_a_batch_dimension(batch_matmul_benchmark: Path) -> None:
    problem = _parse(batch_matmul_benchmark)
    assert (
        problem.kind,
        problem.batch_sizes,
        problem.m_sizes,
        problem.n_sizes,
        problem.k_sizes,
    ) == (
        "batch_matmul",
        (4,),
        (32,),
        (16,),
        (64,),
    )


def test_a_root_of_no_family_is_refused(argmax_benchmark: Path) -> None:
    with pytest.raises(IreetuneError) as excinfo:
        _parse(argmax_benchmark)
    assert "a 2-result reduction" in str(excinfo.value)
    assert "is not supported yet" in str(excinfo.value)


def test_missing_root_op_attribute_is_reported(matmul_benchmark: Path) -> None:
    text = matmul_benchmark.read_text().replace(", root_op = #iree_codegen.root_op<set = 0>", "")
    with ir.Context(), pytest.raises(IreetuneError) as excinfo:
        find_root_op(ir.Module.parse(text))
    assert "no root op found" in str(excinfo.value)


def test_several_root_ops_are_reported(matmul_benchmark: Path) -> None:
    text = matmul_benchmark.read_text().replace(
        "%6 = linalg.fill {", "%6 = linalg.fill {root_op = #iree_codegen.root_op<set = 1>, "
    )
    assert text != matmul_benchmark.read_text()
    with ir.Context(), pytest.raises(IreetuneError) as excinfo:
        find_root_op(ir.Module.parse(text))
    assert "2 root ops found" in str(excinfo.value)
