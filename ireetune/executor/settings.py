"""Which executor a run asks for, and how to reach a Ray cluster: declared once, parsed from the
command line here."""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass

from ireetune.core.arguments import non_negative_int
from ireetune.core.errors import IreetuneError
from ireetune.core.options import add_options, option, options_from_arguments, setting


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


def add_executor_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--executor` and the Ray options (docs/ray.md, declared on `RaySettings`) to a tuning
    command."""
    parser.add_argument(
        "--executor", choices=("local", "ray"), default="local",
        help="where compiles and measurements run: this host (local), or a Ray cluster (ray: "
        "compiles as Ray tasks, measurements in actors pinned to one device each; needs "
        "pip install 'ireetune[ray]')",
    )  # fmt: skip
    add_options(parser, RaySettings)


def parse_executor(arguments: argparse.Namespace) -> tuple[ExecutorKind, RaySettings]:
    """Return the executor a tuning run asked for and its Ray settings."""
    kind = ExecutorKind(arguments.executor)
    settings = options_from_arguments(RaySettings, arguments)
    if settings != RaySettings() and kind is not ExecutorKind.RAY:
        raise IreetuneError("--ray-address and --ray-*-resource need --executor ray")
    return kind, settings
