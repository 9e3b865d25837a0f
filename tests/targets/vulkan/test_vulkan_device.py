"""Vulkan device detection: reports parsed (real lavapipe output, hand-written excerpts of other
devices' public reports) and the IREE target chosen for each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ireetune.core.errors import IreetuneError
from ireetune.targets.vulkan import make_vulkan_target, target_arch
from ireetune.targets.vulkan.archs import (
    IREE_VULKAN_TARGETS,
    LAVAPIPE_LIMITS,
    render_device_target,
)
from ireetune.targets.vulkan.device import (
    VulkanDevice,
    choose_target,
    device_limits,
    find_device,
    parse_iree_device_dump,
    parse_vulkaninfo,
)
from tests.conftest import TESTS
from tests.vulkan_support import IREE_COMPILE, requires_vulkan, vulkan_target


def build_target_attribute(device: VulkanDevice) -> str:
    """Render a `#hal.device.target<...>` that describes the device's own limits.

    Seen to give correct softmax, reduction and matmul results on lavapipe with IREE 3.13, where
    every named target's reductions were wrong:

        #hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb",
          {iree_codegen.target_info = #iree_gpu.target<arch = "", features = "spirv:v1.6,...",
          wgp = <compute = fp32|..., subgroup_size_choices = [8], ...>>}>]>
    """
    return render_device_target(device_limits(device))


REPORTS = (TESTS / "data") / "vulkaninfo"
LAVAPIPE_UUID = "6d65736132322e332e36000000000000"
LAVAPIPE_TARGET = (
    '#hal.device.target<"vulkan", [#hal.executable.target<"vulkan-spirv", "vulkan-spirv-fb", '
    '{iree_codegen.target_info = #iree_gpu.target<arch = "", features = "spirv:v1.6,cap:Shader", '
    "wgp = <compute = fp32|fp16|int32|int16|int8, storage = b64|b32|b16|b8, "
    "subgroup = shuffle|arithmetic, dot = none, subgroup_size_choices = [8], "
    "max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024, "
    "max_workgroup_memory_bytes = 32768, max_workgroup_counts = [65535, 65535, 65535]>>}>]>"
)


def _report(name: str) -> str:
    return (REPORTS / name).read_text()


def test_lavapipe_report_is_read_whole() -> None:
    (device,) = parse_vulkaninfo(_report("lavapipe_full.txt"))
    assert (
        device.name, device.vendor_id, device.device_type, device.uuid, device.api_version,
        device.subgroup_size, device.min_subgroup_size, device.max_subgroup_size,
        device.max_workgroup_invocations, device.max_workgroup_size, device.max_workgroup_count,
        device.shared_memory_bytes, device.cooperative_matrix, device.subgroup_size_control,
    ) == (
        "llvmpipe (LLVM 15.0.6, 256 bits)", 0x10005, "cpu", LAVAPIPE_UUID, (1, 3), 8, 8, 8,
        1024, (1024, 1024, 1024), (65535, 65535, 65535), 32768, False, True,
    )  # fmt: skip
    assert device.subgroup_operations == {
        "basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "quad",
    }  # fmt: skip
    assert (device.float16, device.int8, device.int16, device.int64) == (True, True, True, True)
    assert device.uri == f"vulkan://GPU-{LAVAPIPE_UUID}"


def test_lavapipe_gets_a_custom_target_from_its_limits() -> None:
    (device,) = parse_vulkaninfo(_report("lavapipe_full.txt"))
    choice = choose_target(device)
    assert (choice.named_target, choice.target_attribute) == (None, LAVAPIPE_TARGET)
    assert choice.compile_flags() == [f"--iree-hal-target-device={LAVAPIPE_TARGET}"]
    assert "no named target" in choice.reason


def test_iree_dump_gives_the_same_device_and_target_with_stand_in_limits() -> None:
    (device,) = parse_iree_device_dump(_report("lavapipe_iree_dump.txt"))
    assert (device.name, device.uuid, device.subgroup_size, device.runs_on_cpu) == (
        "llvmpipe (LLVM 15.0.6, 256 bits)", LAVAPIPE_UUID, 8, True,
    )  # fmt: skip
    assert (device.limits_reported, device.shared_memory_bytes, device.max_workgroup_invocations) == (
        False, 32768, 1024,
    )  # fmt: skip
    assert choose_target(device).named_target is None
    assert "subgroup_size_choices = [8]" in choose_target(device).target_attribute


@pytest.mark.parametrize(
    ("report", "named_target", "facts"),
    [
        ("nvidia_rtx4070.txt", "sm_89", (0x10DE, 32, 32, 32, 49152, 1024, True)),
        ("amd_rx6500xt_radv.txt", "rdna2", (0x1002, 64, 32, 64, 65536, 1024, False)),
        ("adreno_termux.txt", "adreno", (0x5143, 64, 64, 128, 32768, 1024, False)),
        ("mali_two_gpus.txt", "valhall4", (0x13B5, 16, 16, 16, 32768, 512, False)),
    ],
)
def test_gpus_of_known_vendors_get_their_named_target(
    report: str, named_target: str, facts: tuple[int, ...]
) -> None:
    device = parse_vulkaninfo(_report(report))[0]
    assert (
        device.vendor_id, device.subgroup_size, device.min_subgroup_size,
        device.max_subgroup_size, device.shared_memory_bytes, device.max_workgroup_invocations,
        device.cooperative_matrix,
    ) == facts  # fmt: skip
    choice = choose_target(device)
    assert (choice.named_target, choice.target_attribute) == (named_target, "")
    assert choice.compile_flags() == [
        "--iree-hal-target-device=vulkan",
        f"--iree-vulkan-target={named_target}",
    ]


def test_a_gpu_whose_subgroup_size_no_named_target_has_gets_a_custom_target() -> None:
    valhall, bifrost = parse_vulkaninfo(_report("mali_two_gpus.txt"))
    assert (valhall.name, bifrost.name) == ("Mali-G78", "Mali-G52")
    choice = choose_target(bifrost)
    assert choice.named_target is None
    assert choice.reason == (
        "its subgroup size 8 is not one of valhall4's [16], so reductions compiled for it "
        "would be wrong"
    )
    # Vulkan 1.1 guarantees SPIR-V 1.3; no shuffle or arithmetic subgroup operations.
    assert 'features = "spirv:v1.3,cap:Shader"' in choice.target_attribute
    assert "subgroup = none" in choice.target_attribute
    assert "max_thread_count_per_workgroup = 384" in choice.target_attribute


def test_a_vendor_without_named_targets_gets_its_limits() -> None:
    (device,) = parse_vulkaninfo(_report("intel_xe_tgl.txt"))
    choice = choose_target(device)
    assert choice.named_target is None
    assert choice.reason == "IREE has no named Vulkan target for vendor 0x8086"
    assert (
        "subgroup_size_choices = [32], max_workgroup_sizes = [1024, 1024, 1024], "
        "max_thread_count_per_workgroup = 1024, max_workgroup_memory_bytes = 65536"
    ) in choice.target_attribute


def test_a_device_uri_picks_its_device() -> None:
    devices = parse_vulkaninfo(_report("mali_two_gpus.txt"))
    assert find_device(devices, "vulkan").name == "Mali-G78"
    picked = find_device(devices, "vulkan://GPU-0000000a000000000000000000000052")
    assert picked.name == "Mali-G52"
    with pytest.raises(IreetuneError) as excinfo:
        find_device(devices, "vulkan://GPU-ffff")
    assert "no Vulkan device 'vulkan://GPU-ffff'" in str(excinfo.value)
    with pytest.raises(IreetuneError) as no_device:
        find_device([], "vulkan")
    assert "mesa-vulkan-drivers" in str(no_device.value)


def test_reports_without_devices_read_as_none() -> None:
    assert parse_vulkaninfo("") == []
    assert parse_vulkaninfo("ERROR: vkCreateInstance failed") == []
    assert parse_iree_device_dump("") == []


MATMUL = """
func.func @main(%a: tensor<16x32xf32>, %b: tensor<32x16xf32>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x16xf32>)
                     outs(%f : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %r : tensor<16x16xf32>
}
"""


def test_every_chosen_target_is_one_iree_compiles_for(tmp_path: Path) -> None:
    """Each recorded device's choice (named targets and custom attributes) compiles a matmul."""
    source = tmp_path / "mm.mlir"
    source.write_text(MATMUL)
    choices = [
        choose_target(device)
        for report in sorted(REPORTS.glob("*.txt"))
        for device in parse_vulkaninfo(report.read_text())
    ]
    assert len(choices) == 7
    failures = []
    for choice in choices:
        result = subprocess.run(
            [IREE_COMPILE, str(source), *choice.compile_flags(),
             "--compile-to=executable-configurations", "-o", str(tmp_path / "out.mlir")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            failures.append((choice.device.name, result.stderr[-300:]))
    assert failures == []


def test_custom_attribute_of_minimal_device_names_the_minimums() -> None:
    (device,) = parse_vulkaninfo(_report("lavapipe_full.txt"))
    from dataclasses import replace

    minimal = replace(device, float16=False, int8=False, int16=False, int64=False,
                      storage8=False, storage16=False, api_version=(1, 2))  # fmt: skip
    text = build_target_attribute(minimal)
    assert 'features = "spirv:v1.5,cap:Shader", wgp = <compute = fp32|int32, storage = b32,' in text


def test_each_choice_is_a_target_vulkan_name_parses_again() -> None:
    """A run records `vulkan:NAME`; the database and the split flow parse it again."""
    arches = {}
    for report in sorted(REPORTS.glob("*.txt")):
        for device in parse_vulkaninfo(report.read_text()):
            arch, limits = target_arch(choose_target(device))
            arches[device.name] = (arch, limits is not None)
            assert arch in IREE_VULKAN_TARGETS or arch in ("lavapipe", "device")
    assert arches == {
        "Adreno (TM) 650": ("adreno", False),
        "AMD Radeon RX 6500 XT (RADV NAVI24)": ("rdna2", False),
        "Intel(R) Xe Graphics (TGL GT2)": ("device", True),
        "llvmpipe (LLVM 15.0.6, 256 bits)": ("lavapipe", True),
        "Mali-G78": ("valhall4", False),
        "Mali-G52": ("device", True),
        "NVIDIA GeForce RTX 4070": ("sm_89", False),
    }
    (lavapipe,) = parse_vulkaninfo(_report("lavapipe_full.txt"))
    # The lavapipe reported here is the one ireetune's `vulkan:lavapipe` describes.
    assert target_arch(choose_target(lavapipe))[1] == LAVAPIPE_LIMITS
    assert make_vulkan_target("lavapipe").target_flags() == choose_target(lavapipe).compile_flags()


@requires_vulkan
def test_bare_vulkan_target_is_this_machines_device() -> None:
    target = make_vulkan_target("")
    choice = vulkan_target()
    assert choice is not None
    assert target.target_flags() == choice.compile_flags()
    assert target.name == f"vulkan:{target_arch(choice)[0]}"
    assert make_vulkan_target("device").target_flags() == target.target_flags()
