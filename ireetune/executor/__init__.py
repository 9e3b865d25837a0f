"""Executors: where compiles and measurements run (this host, or a Ray cluster).

`base.py` is the executor interface and the local executor; `ray_executor.py` the Ray one;
`flag_files.py` the files a compile's flags name, sent with a compile to another node. This
module holds the choice (`ExecutorKind`, `RaySettings`) and `open_executor`, which a flow calls
once and hands the executor to its stages.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass

from ireetune.core.arguments import non_negative_int
from ireetune.core.options import option, setting
from ireetune.executor.base import Executor, LocalExecutor


class ExecutorKind(enum.Enum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True)
class RaySettings:
    """How to reach and use a Ray cluster.

    `address` is a running cluster's (`ray start --head` prints it; "auto" finds the local one);
    empty starts a private one-node cluster for the run. `compile_resource` names a custom
    resource that only nodes with the IREE compiler advertise (`ray start --resources`), so
    compile tasks land only there; `device_resource` likewise names the resource of the nodes
    whose devices measure (one unit per device); empty means any node (`num_gpus=1` on GPUs).
    `compile_retries` is how often a compile lost with its worker or node is tried again.
    """

    address: str = option(
        "", flag="--ray-address", metavar="ADDR",
        help="address of a running Ray cluster (e.g. 10.0.0.1:6379, or auto); default: start a "
        "private one-node cluster for the run",
    )  # fmt: skip
    compile_resource: str = option(
        "", flag="--ray-compile-resource", metavar="NAME",
        help="custom Ray resource that nodes with the IREE compiler advertise; compile tasks "
        "run only there (default: any node)",
    )  # fmt: skip
    device_resource: str = option(
        "", flag="--ray-device-resource", metavar="NAME",
        help="custom Ray resource, one unit per device, of the nodes that measure (e.g. H100); "
        "default: any node with a GPU (num_gpus=1), any node for the CPU",
    )  # fmt: skip
    compile_retries: int = setting(3, type=non_negative_int)
    # Start a private cluster with this many CPUs (0: all of this host's); tests use 2.
    num_cpus: int = setting(0, type=non_negative_int)


@contextlib.contextmanager
def open_executor(kind: ExecutorKind, ray: RaySettings | None = None) -> Iterator[Executor]:
    """Start the chosen executor for a run (the flow hands it to its stages); close it after."""
    if kind is ExecutorKind.LOCAL:
        yield LocalExecutor()
        return
    from ireetune.executor.ray_executor import RayExecutor

    executor = RayExecutor(ray or RaySettings())
    try:
        yield executor
    finally:
        executor.close()


__all__ = [
    "Executor",
    "ExecutorKind",
    "LocalExecutor",
    "RaySettings",
    "open_executor",
]
