"""Time the same problem with the vendor library through torch (cuBLAS, cuDNN, MKL, rocBLAS).

torch is optional: when it cannot be imported, or the target's device is not available to it,
the comparison is reported as unavailable with the reason, and nothing else changes.
"""

from __future__ import annotations

import importlib
import statistics
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ireetune.profiler.operations import (
    ConvLayout,
    ConvOperation,
    ElementType,
    MatmulOperation,
    Operation,
    OperationKind,
)


@dataclass(frozen=True)
class VendorTiming:
    """The vendor library's median time in milliseconds, or None and the reason."""

    runtime_ms: float | None
    library: str
    reason: str = ""


def import_torch() -> ModuleType | None:
    """Return the torch module, or None when it is not installed (or fails to import)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _torch_dtype(torch: Any, element_type: ElementType) -> Any:
    return {
        ElementType.F32: torch.float32,
        ElementType.F16: torch.float16,
        ElementType.BF16: torch.bfloat16,
    }[element_type]


def _build_call(torch: Any, operation: Operation, device: str) -> Any:
    """Return a no-argument function that runs the operation once with the vendor library."""
    dtype = _torch_dtype(torch, operation.input_type)

    def random(*shape: int) -> Any:
        return torch.randn(*shape, device=device, dtype=dtype)

    if isinstance(operation, ConvOperation):
        image = random(operation.batch, operation.channels, operation.height, operation.width)
        weights = random(
            operation.filters, operation.channels, operation.kernel_h, operation.kernel_w
        )
        if operation.layout is ConvLayout.NHWC_HWCF:
            image = image.to(memory_format=torch.channels_last)
            weights = weights.to(memory_format=torch.channels_last)
        conv2d = torch.nn.functional.conv2d
        return lambda: conv2d(image, weights, stride=operation.stride, dilation=operation.dilation)
    assert isinstance(operation, MatmulOperation)
    batch = () if operation.batch is None else (operation.batch,)
    lhs = random(*batch, *operation.lhs_shape[-2:])
    rhs = random(*batch, *operation.rhs_shape[-2:])
    lhs_view = lhs.transpose(-1, -2) if operation.layout.lhs_transposed else lhs
    rhs_view = rhs.transpose(-1, -2) if operation.layout.rhs_transposed else rhs
    if operation.kind is OperationKind.MATMUL_BIAS_RELU:
        bias = random(operation.n)
        return lambda: torch.relu(torch.addmm(bias, lhs_view, rhs_view))
    return lambda: torch.matmul(lhs_view, rhs_view)


def time_with_vendor(
    operation: Operation, gpu: bool, repetitions: int = 5, min_repetition_s: float = 0.02
) -> VendorTiming:
    """Time the operation with torch on the GPU (`gpu`) or the CPU; median per call in ms."""
    torch: Any = import_torch()
    if torch is None:
        return VendorTiming(None, "torch", "torch is not installed")
    if operation.input_type.is_integer:
        return VendorTiming(None, "torch", "no vendor comparison for integer types")
    device = "cuda" if gpu else "cpu"
    library = (
        ("cuBLAS/cuDNN" if torch.version.hip is None else "rocBLAS/MIOpen") if gpu else "torch CPU"
    )
    if gpu and not torch.cuda.is_available():
        return VendorTiming(None, library, "torch sees no GPU")
    try:
        call = _build_call(torch, operation, device)
        synchronize = torch.cuda.synchronize if gpu else (lambda: None)

        def time_calls(batch: int) -> float:
            start = time.perf_counter()
            for _ in range(batch):
                call()
            synchronize()
            return time.perf_counter() - start

        time_calls(1)
        # Calls are timed in batches long enough for the clock: doubled up to 16384 calls.
        batch = 1
        while time_calls(batch) < min_repetition_s and batch < 1 << 14:
            batch *= 2
        times_ms = [time_calls(batch) * 1000.0 / batch for _ in range(repetitions)]
    except RuntimeError as error:  # torch reports unsupported dtype/device pairs this way.
        return VendorTiming(None, library, f"torch failed: {str(error).splitlines()[0][:200]}")
    return VendorTiming(statistics.median(times_ms), library)
