"""GPU targets (CUDA and ROCm): the search space comes from the compiler's own SMT constraints.

`target.py` holds the shared target and its family spaces, and what differs between the two
(flags, runtime driver, how a spec is applied); `space.py` the space they share,
`facts.py` what it knows of the GPU; `constraints.py`, `template.py` and `smt_space.py` the
compiler's SMT problems; the hand-written ones in `attention_space.py`, `reduction_space.py`,
`simt_space.py` (`constraints.make_space`), the batch-free proxy in `batch_proxy.py`; `resources.py`
the shared-memory and register check; `ordering.py` the candidate ordering heuristic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ireetune.targets.gpu.archs import GpuFamily, parse_gpu_arch

# For types only: `targets/gpu/flags.py` is read on hosts without the compiler or z3 (a run
# folder's flags are checked there), and the target needs both.
if TYPE_CHECKING:
    from ireetune.targets.gpu.target import GpuTarget


def make_gpu_target(family: str, arch: str, pipelines: Sequence[str] = ()) -> GpuTarget:
    """Build the target for `cuda:<arch>` or `rocm:<arch>` (also spelled `hip:<arch>`)."""
    gpu_arch = parse_gpu_arch(family, arch)
    from ireetune.targets.gpu.target import CudaTarget, RocmTarget

    if gpu_arch.family is GpuFamily.CUDA:
        return CudaTarget(gpu_arch, pipelines)
    return RocmTarget(gpu_arch, pipelines)


__all__ = ["make_gpu_target"]
