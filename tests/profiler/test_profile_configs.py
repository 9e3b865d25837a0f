"""Configuration requests, knob files and stable configuration names."""

from __future__ import annotations

from pathlib import Path

import pytest

from ireetune.core.candidate import make_knobs
from ireetune.core.errors import IreetuneError
from ireetune.profiler.configs import (
    ConfigKind,
    compile_patterns,
    is_selected,
    name_knobs,
    parse_config_request,
)


def test_knob_names_are_short_stable_and_unambiguous() -> None:
    cpu = make_knobs({"dist_m": 64, "dist_n": 32, "vec_m": 8, "vec_n": 16, "vec_k": 4})
    assert name_knobs(cpu) == "cfg_dm64_dn32_vk4_vm8_vn16"
    gpu = make_knobs({"wg_0": 64, "wg_1": 128, "mma_idx": 2, "sg_size": 32})
    assert name_knobs(gpu) == "cfg_mi2_ss32_w064_w1128"
    clash = make_knobs({"sg_size": 32, "sub_size": 4})
    assert name_knobs(clash) == "cfg_sg_size32_sub_size4"


def test_parse_config_request(tmp_path: Path) -> None:
    spec = tmp_path / "tuned-spec.mlir"
    spec.write_text("module {}\n")
    knobs = tmp_path / "knobs.json"
    knobs.write_text('[{"dist_m": 64, "vec_k": 8}, {"dist_m": 32, "vec_k": 8}]')
    request = parse_config_request(f"default,3,{spec},{knobs}")
    assert request.search_space_count == 3
    assert [(c.name, c.kind) for c in request.fixed] == [
        ("spec_tuned_spec", ConfigKind.SPEC),
        ("cfg_dm64_vk8", ConfigKind.KNOBS),
        ("cfg_dm32_vk8", ConfigKind.KNOBS),
    ]
    assert parse_config_request("default").search_space_count == 0


@pytest.mark.parametrize(
    ("text", "content", "message"),
    [
        ("nothing.json", None, "is not default, a number, or an existing file"),
        ("bad.json", "{", "is not valid JSON"),
        ("bad.json", "[1]", "expected an object of knob values"),
        ("bad.json", '[{"dist_m": true}]', "knob values are integers or strings"),
        ("knobs.txt", "x", "neither a spec (.mlir) nor a knob list (.json)"),
        (",", None, "nothing given"),
    ],
)
def test_bad_config_requests(tmp_path: Path, text: str, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / text).write_text(content)
    argument = str(tmp_path / text) if content is not None or text.endswith(".json") else text
    with pytest.raises(IreetuneError) as excinfo:
        parse_config_request(argument)
    assert message in str(excinfo.value)


def test_dispatch_selection_by_regex() -> None:
    patterns = compile_patterns(["^mmt_.*_default$", "cfg_dm64"])
    names = [
        "mmt_8x8x8_f32t_f32t_f32t_default",
        "matmul_8x8x8_f32t_f32t_f32t_default",
        "matmul_x_cfg_dm64_vk8",
    ]
    assert [n for n in names if is_selected(n, patterns)] == [names[0], names[2]]
    assert is_selected("anything", ())
    with pytest.raises(IreetuneError) as excinfo:
        compile_patterns(["("])
    assert "is not a regular expression" in str(excinfo.value)
