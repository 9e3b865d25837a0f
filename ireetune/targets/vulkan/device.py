"""What the machine's Vulkan device reports, and the IREE Vulkan target that describes it.

A Vulkan binary is compiled for a target that states the device's subgroup size, workgroup limits
and shared memory. IREE knows named targets (`ampere`, `rdna3`, `valhall4`, `adreno`); where the
device is one of those, its name is the default. Where no named target describes the device
correctly, the default is a custom `#hal.device.target<...>` attribute built from the device's
own limits. Mesa's lavapipe is the case that matters: its subgroup size is 8, no named target has
8, and the reductions IREE compiles for a named target give wrong results on it (seen in 3.13:
row sums off by 66 on `adreno`, NaN on `valhall4`).

The device is read from `vulkaninfo` (every limit) when it is installed, else from
`iree-run-module --dump_devices=vulkan` (no shared-memory or invocation limits: the Vulkan
minimums stand in, or lavapipe's known limits). Both texts are parsed here, so recorded outputs
of other devices can be tested without them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ireetune.core.errors import IreetuneError
from ireetune.core.tools import find_tool, run_tool
from ireetune.targets.vulkan.archs import VulkanDeviceLimits, render_device_target

# PCI vendor ids (Vulkan's `vendorID`) of the vendors IREE has named targets for, and Mesa's.
VENDOR_AMD = 0x1002
VENDOR_NVIDIA = 0x10DE
VENDOR_ARM = 0x13B5
VENDOR_QUALCOMM = 0x5143
VENDOR_MESA = 0x10005

# The minimums every Vulkan device guarantees (the spec's required limits).
_MINIMUM_SHARED_MEMORY = 16384
_MINIMUM_INVOCATIONS = 128
_MINIMUM_WORKGROUP_SIZE = (128, 128, 64)
_MINIMUM_WORKGROUP_COUNT = (65535, 65535, 65535)
# Lavapipe's limits (Mesa 22-24), for when only IREE's dump, which has no limits, is available.
_LAVAPIPE_SHARED_MEMORY = 32768
_LAVAPIPE_INVOCATIONS = 1024

# VkSubgroupFeatureFlagBits, as vulkaninfo spells them and IREE's dump gives them as a mask.
_SUBGROUP_OPERATIONS = (
    "basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad",
)  # fmt: skip


@dataclass(frozen=True)
class VulkanDevice:
    """One Vulkan physical device as it reports itself."""

    name: str
    vendor_id: int
    # `cpu`, `discrete-gpu`, `integrated-gpu`, `virtual-gpu` or `other`.
    device_type: str
    # 32 hex digits, the part of `vulkan://GPU-<uuid>` after `GPU-` ("" when not reported).
    uuid: str
    api_version: tuple[int, int]
    subgroup_size: int
    min_subgroup_size: int
    max_subgroup_size: int
    subgroup_operations: frozenset[str]
    subgroup_size_control: bool
    max_workgroup_invocations: int
    max_workgroup_size: tuple[int, int, int]
    max_workgroup_count: tuple[int, int, int]
    shared_memory_bytes: int
    float16: bool
    int8: bool
    int16: bool
    int64: bool
    storage8: bool
    storage16: bool
    cooperative_matrix: bool
    # False when the limits are stand-ins (IREE's dump gives none).
    limits_reported: bool = True

    @property
    def uri(self) -> str:
        """Name the IREE runtime device that is this one (`vulkan://GPU-<uuid>`)."""
        return f"vulkan://GPU-{self.uuid}" if self.uuid else "vulkan"

    @property
    def runs_on_cpu(self) -> bool:
        """Say whether the device is a software rasteriser on the host CPU (lavapipe)."""
        return self.device_type == "cpu"


@dataclass(frozen=True)
class VulkanTargetChoice:
    """The IREE Vulkan target chosen for a device: a named one, or an attribute of its own."""

    device: VulkanDevice
    # The `--iree-vulkan-target` name, or None for a custom attribute.
    named_target: str | None
    # The custom `#hal.device.target<...>` text (empty for a named target).
    target_attribute: str
    reason: str
    # What the custom target states (None for a named target).
    limits: VulkanDeviceLimits | None = None

    def compile_flags(self) -> list[str]:
        """Return the iree-compile flags that select this target."""
        if self.named_target is not None:
            return ["--iree-hal-target-device=vulkan", f"--iree-vulkan-target={self.named_target}"]
        return [f"--iree-hal-target-device={self.target_attribute}"]

    def describe(self) -> str:
        """Say in one line which target and why (for the summary and `--help` docs)."""
        what = self.named_target or "a custom target from the device's limits"
        return f"{what} for {self.device.name}: {self.reason}"


# ------------------------------------------------------------------------------------------------
# Parsing vulkaninfo's text output.


def _section_values(lines: list[str]) -> dict[str, str | list[str]]:
    """Read `key = value` lines and `key: count = N` lists (first occurrence of a key wins;
    Vulkan11Properties repeats the subgroup fields under other names)."""
    values: dict[str, str | list[str]] = {}
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        listed = re.match(r"^(\w+):\s*count\s*=\s*(\d+)$", line)
        if listed:
            key, count = listed.group(1), int(listed.group(2))
            items = [lines[index + offset].strip() for offset in range(count)]
            index += count
            values.setdefault(key, items)
            continue
        # Older vulkaninfo writes arrays as `maxComputeWorkGroupSize[0] = 1024`.
        indexed = re.match(r"^(\w+)\[(\d)\]\s*=\s*(.+)$", line)
        if indexed:
            item_list = values.setdefault(indexed.group(1), [])
            if isinstance(item_list, list):
                item_list.append(indexed.group(3).strip())
            continue
        pair = re.match(r"^(\w+)\s*=\s*(.*)$", line)
        if pair:
            values.setdefault(pair.group(1), pair.group(2).strip())
        elif re.match(r"^VK_\w+\s*:\s*extension revision", line):
            values.setdefault(line.split(":")[0].strip(), "extension")
    return values


def _number(text: str | list[str] | None, default: int) -> int:
    if not isinstance(text, str) or not text:
        return default
    match = re.match(r"^(0x[0-9a-fA-F]+|\d+)", text)
    return int(match.group(1), 0) if match else default


def _triple(items: str | list[str] | None, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if not isinstance(items, list) or len(items) != 3:
        return default
    return (_number(items[0], default[0]), _number(items[1], default[1]), _number(items[2], default[2]))  # fmt: skip


def _flag(values: Mapping[str, str | list[str]], key: str) -> bool:
    value = values.get(key)
    return isinstance(value, str) and value.lower() in ("true", "1", "yes")


def _operations(items: str | list[str] | None) -> frozenset[str]:
    if not isinstance(items, list):
        return frozenset()
    names = {item.removeprefix("SUBGROUP_FEATURE_").removesuffix("_BIT").lower() for item in items}
    return frozenset(name for name in _SUBGROUP_OPERATIONS if name in names)


def _device_type(text: str) -> str:
    kind = text.removeprefix("PHYSICAL_DEVICE_TYPE_").lower().replace("_", "-")
    return kind if kind in ("cpu", "discrete-gpu", "integrated-gpu", "virtual-gpu") else "other"


def _api_version(text: str | list[str] | None) -> tuple[int, int]:
    # `1.3.230 (4206822)`, or `4198582 (1.1.182)` from older vulkaninfo.
    match = re.search(r"(\d+)\.(\d+)\.\d+", text) if isinstance(text, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else (1, 0)


def parse_vulkaninfo(text: str) -> list[VulkanDevice]:
    """Read every device of `vulkaninfo`'s full text output (GPU0, GPU1, ...), in its order."""
    _, found, devices_part = text.partition("Device Properties and Extensions:")
    if not found:
        return []
    sections = re.split(r"^GPU\d+:\s*$", devices_part, flags=re.MULTILINE)[1:]
    devices = []
    for section in sections:
        values = _section_values(section.splitlines())
        if "deviceName" not in values:
            continue
        subgroup = _number(values.get("subgroupSize"), 0)
        operations = _operations(
            values.get("supportedOperations") or values.get("subgroupSupportedOperations")
        )
        devices.append(
            VulkanDevice(
                name=str(values["deviceName"]),
                vendor_id=_number(values.get("vendorID"), 0),
                device_type=_device_type(str(values.get("deviceType", ""))),
                uuid=str(values.get("deviceUUID", "")).replace("-", "").lower(),
                api_version=_api_version(values.get("apiVersion")),
                subgroup_size=subgroup,
                min_subgroup_size=_number(values.get("minSubgroupSize"), subgroup),
                max_subgroup_size=_number(values.get("maxSubgroupSize"), subgroup),
                subgroup_operations=operations,
                subgroup_size_control=_flag(values, "subgroupSizeControl"),
                max_workgroup_invocations=_number(
                    values.get("maxComputeWorkGroupInvocations"), _MINIMUM_INVOCATIONS
                ),
                max_workgroup_size=_triple(
                    values.get("maxComputeWorkGroupSize"), _MINIMUM_WORKGROUP_SIZE
                ),
                max_workgroup_count=_triple(
                    values.get("maxComputeWorkGroupCount"), _MINIMUM_WORKGROUP_COUNT
                ),
                shared_memory_bytes=_number(
                    values.get("maxComputeSharedMemorySize"), _MINIMUM_SHARED_MEMORY
                ),
                float16=_flag(values, "shaderFloat16"),
                int8=_flag(values, "shaderInt8"),
                int16=_flag(values, "shaderInt16"),
                int64=_flag(values, "shaderInt64"),
                storage8=_flag(values, "storageBuffer8BitAccess"),
                storage16=_flag(values, "storageBuffer16BitAccess"),
                cooperative_matrix="VK_KHR_cooperative_matrix" in values
                or _flag(values, "cooperativeMatrix"),
            )
        )
    return devices


# ------------------------------------------------------------------------------------------------
# Parsing IREE's own device dump (`iree-run-module --dump_devices=vulkan`).


def parse_iree_device_dump(text: str) -> list[VulkanDevice]:
    """Read every device of IREE's Vulkan device dump; its limits are stand-ins (see module)."""
    devices = []
    for block in re.split(r"^# --device=", text, flags=re.MULTILINE)[1:]:
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in block.splitlines())
            if key and not key.startswith(("#", " "))
        )
        if "name" not in fields:
            continue
        features = dict(item.split("=", 1) for item in fields.get("features", "").split() if "=" in item)  # fmt: skip
        subgroup = dict(item.split("=", 1) for item in fields.get("subgroup", "").split() if "=" in item)  # fmt: skip
        mask = _number(subgroup.get("operations"), 0)
        size = _number(subgroup.get("size"), 0)
        vendor_id = _number(fields.get("vendor_id"), 0)
        lavapipe = vendor_id == VENDOR_MESA and fields.get("type") == "cpu"
        invocations = _LAVAPIPE_INVOCATIONS if lavapipe else _MINIMUM_INVOCATIONS
        devices.append(
            VulkanDevice(
                name=fields["name"],
                vendor_id=vendor_id,
                device_type=fields.get("type", "other").replace("_", "-"),
                uuid=fields.get("device_uuid", "").lower(),
                api_version=_api_version(fields.get("api")),
                subgroup_size=size,
                min_subgroup_size=_number(subgroup.get("minSubgroupSize"), size),
                max_subgroup_size=_number(subgroup.get("maxSubgroupSize"), size),
                subgroup_operations=frozenset(
                    name for bit, name in enumerate(_SUBGROUP_OPERATIONS) if mask & (1 << bit)
                ),
                subgroup_size_control=features.get("subgroupSizeControl") == "yes",
                max_workgroup_invocations=invocations,
                max_workgroup_size=(invocations, invocations, 64),
                max_workgroup_count=_MINIMUM_WORKGROUP_COUNT,
                shared_memory_bytes=_LAVAPIPE_SHARED_MEMORY if lavapipe else _MINIMUM_SHARED_MEMORY,
                float16=features.get("shaderFloat16") == "yes",
                int8=features.get("shaderInt8") == "yes",
                # The dump does not list these; 16-bit storage implies the 16-bit type is usable.
                int16=features.get("storageBuffer16BitAccess") == "yes",
                int64=False,
                storage8=features.get("storageBuffer8BitAccess") == "yes",
                storage16=features.get("storageBuffer16BitAccess") == "yes",
                cooperative_matrix=features.get("cooperativeMatrix") == "yes",
                limits_reported=False,
            )
        )
    return devices


# ------------------------------------------------------------------------------------------------
# Choosing the target.


@dataclass(frozen=True)
class _NamedTarget:
    name: str
    subgroup_size_choices: tuple[int, ...]


# NVIDIA generations by product name (IREE 3.13 knows no Vulkan target past sm_89 but sm_120;
# Hopper parts take the fallback, `ampere`, whose features they all have).
_NVIDIA_GENERATIONS = (
    (r"RTX 50|RTX PRO|B200|B100|GB\d", "sm_120"),
    (r"RTX 40|\bL4\b|\bL40|ADA", "sm_89"),
    (r"RTX 20|GTX 16|\bT4\b|TITAN RTX|QUADRO RTX", "turing"),
    (r"V100|TITAN V\b", "volta"),
    (r"GTX 10|P100|\bP40\b|\bP4\b|TITAN X", "pascal"),
)
# RDNA generations by product or Mesa code name (`RX 7900`, `RADV NAVI31`).
_AMD_GENERATIONS = (
    (r"RX 9\d{3}|NAVI4|GFX12", "rdna4"),
    (r"RX 7\d{3}|NAVI3|GFX11|780M|760M|PHOENIX", "rdna3"),
    (r"RX 6\d{3}|NAVI2|GFX103|680M|660M|REMBRANDT|VANGOGH", "rdna2"),
    (r"RX 5\d{3}|NAVI1|GFX101", "rdna1"),
)


def _generation_target(
    device_name: str,
    generations: tuple[tuple[str, str], ...],
    fallback: str,
    subgroup_size_choices: tuple[int, ...],
) -> _NamedTarget:
    """Pick the first generation whose pattern the device's name matches (else the fallback)."""
    name = device_name.upper()
    for pattern, target in generations:
        if re.search(pattern, name):
            return _NamedTarget(target, subgroup_size_choices)
    return _NamedTarget(fallback, subgroup_size_choices)


def named_target_for(device: VulkanDevice) -> _NamedTarget | None:
    """Return IREE's named target for the device's vendor and generation, if it has one."""
    if device.runs_on_cpu:
        return None
    if device.vendor_id == VENDOR_NVIDIA:
        return _generation_target(device.name, _NVIDIA_GENERATIONS, "ampere", (32,))
    if device.vendor_id == VENDOR_AMD:
        return _generation_target(device.name, _AMD_GENERATIONS, "rdna3", (32, 64))
    if device.vendor_id == VENDOR_ARM:
        return _NamedTarget("valhall4", (16,))
    if device.vendor_id == VENDOR_QUALCOMM:
        return _NamedTarget("adreno", (64,))
    return None


def _named_target_mismatch(device: VulkanDevice, target: _NamedTarget) -> str | None:
    """Say why a named target does not describe the device (None: it does). Kernels compiled for
    a subgroup size the device does not run (without `subgroup_size` set, as IREE's reductions
    are) give wrong results."""
    low, high = device.min_subgroup_size, device.max_subgroup_size
    if device.subgroup_size not in target.subgroup_size_choices:
        return (
            f"its subgroup size {device.subgroup_size} is not one of {target.name}'s "
            f"{list(target.subgroup_size_choices)}"
        )
    outside = [size for size in target.subgroup_size_choices if not low <= size <= high]
    if outside:
        return f"{target.name}'s subgroup sizes {outside} are outside its range [{low}, {high}]"
    return None


def device_limits(device: VulkanDevice) -> VulkanDeviceLimits:
    """Describe the device as a custom target states it (`VulkanTarget`'s limits).

    Its subgroup sizes are the device's own default size only: a kernel that sets no
    `subgroup_size` (IREE's reductions) runs at that size.
    """
    compute = ["fp32"] + ["fp16"] * device.float16 + ["int32"] + ["int16"] * device.int16
    compute += ["int8"] * device.int8
    storage = ["b64"] * device.int64 + ["b32"] + ["b16"] * device.storage16
    storage += ["b8"] * device.storage8
    subgroup = [name for name in ("shuffle", "arithmetic") if name in device.subgroup_operations]
    return VulkanDeviceLimits(
        subgroup_sizes=(device.subgroup_size,),
        max_workgroup_sizes=device.max_workgroup_size,
        max_threads=device.max_workgroup_invocations,
        max_workgroup_memory_bytes=device.shared_memory_bytes,
        compute="|".join(compute),
        storage="|".join(storage),
        subgroup_operations="|".join(subgroup) or "none",
        # The highest SPIR-V version the Vulkan version guarantees.
        spirv_version={(1, 0): "v1.0", (1, 1): "v1.3", (1, 2): "v1.5"}.get(
            device.api_version, "v1.6"
        ),
        max_workgroup_counts=device.max_workgroup_count,
    )


def choose_target(device: VulkanDevice) -> VulkanTargetChoice:
    """Choose the IREE Vulkan target for a device: its vendor's named target where that states
    the device's subgroup size, else a custom target from the device's limits."""
    named = named_target_for(device)
    if named is not None:
        mismatch = _named_target_mismatch(device, named)
        if mismatch is None:
            reason = f"vendor 0x{device.vendor_id:04x}, subgroup size {device.subgroup_size}"
            return VulkanTargetChoice(device, named.name, "", reason)
        reason = f"{mismatch}, so reductions compiled for it would be wrong"
    elif device.runs_on_cpu:
        reason = (
            f"a CPU implementation (subgroup size {device.subgroup_size}) that no named target "
            "describes"
        )
    else:
        reason = f"IREE has no named Vulkan target for vendor 0x{device.vendor_id:04x}"
    limits = device_limits(device)
    return VulkanTargetChoice(device, None, render_device_target(limits), reason, limits)


# ------------------------------------------------------------------------------------------------
# Reading this machine's devices.


def _run_vulkaninfo() -> str:
    """Return `vulkaninfo`'s full output, or "" when it is missing or fails."""
    # Without a display it warns on stderr (ignored); the device part of stdout is complete.
    result = run_tool(["vulkaninfo"], timeout_s=60)
    return result.stdout if result.returncode == 0 else ""


def _run_iree_dump() -> str:
    try:
        tool = find_tool("iree-run-module")
    except IreetuneError:
        return ""
    result = run_tool([tool, "--dump_devices=vulkan"], timeout_s=60)
    return result.stdout if result.returncode == 0 else ""


def read_vulkan_devices() -> list[VulkanDevice]:
    """Return this machine's Vulkan devices: from vulkaninfo, else from IREE's dump, whose
    devices are the ones IREE can open (vulkaninfo also lists those it may not)."""
    from_iree = parse_iree_device_dump(_run_iree_dump())
    from_vulkaninfo = {device.uuid: device for device in parse_vulkaninfo(_run_vulkaninfo())}
    if not from_iree:
        return list(from_vulkaninfo.values())
    return [
        replace(from_vulkaninfo[device.uuid], uuid=device.uuid)
        if device.uuid in from_vulkaninfo
        else device
        for device in from_iree
    ]


def find_device(devices: list[VulkanDevice], device_uri: str) -> VulkanDevice:
    """Return the device a runtime URI names (`vulkan`: the first; `vulkan://GPU-<uuid>`)."""
    if not devices:
        raise IreetuneError(
            "no Vulkan device was found; install a Vulkan driver (on a machine without a GPU, "
            "Mesa's lavapipe: apt-get install mesa-vulkan-drivers libvulkan1 vulkan-tools)"
        )
    _, _, path = device_uri.partition("://")
    if not path:
        return devices[0]
    uuid = path.removeprefix("GPU-").replace("-", "").lower()
    for device in devices:
        if device.uuid == uuid:
            return device
    known = ", ".join(device.uri for device in devices)
    raise IreetuneError(f"no Vulkan device '{device_uri}'; this machine has {known}")


def detect_target(device_uri: str = "vulkan") -> VulkanTargetChoice:
    """Choose the target for the Vulkan device at `device_uri` on this machine."""
    return choose_target(find_device(read_vulkan_devices(), device_uri))
