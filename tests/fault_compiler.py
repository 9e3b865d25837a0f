#!/usr/bin/env python3
"""An iree-compile stand-in that injects faults into chosen candidates' compiles.

Used through IREETUNE_IREE_COMPILE, with FAULT_REAL_IREE_COMPILE naming the real compiler. By
default every candidate spec but the baseline's fails with an error. FAULT_COMPILE_MODE picks
other faults, comma-separated: `crash:N` kills candidate N's compile with SIGSEGV, `hang:N` makes
it hang; other candidates then compile for real.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time

REAL_COMPILER = os.environ["FAULT_REAL_IREE_COMPILE"]


def main() -> None:
    faults = dict(
        reversed(item.split(":", 1))
        for item in os.environ.get("FAULT_COMPILE_MODE", "fail-all:*").split(",")
    )
    for argument in sys.argv[1:]:
        match = re.search(r"specs/(\d+)_spec\.mlir$", argument)
        if not match or match.group(1) == "0":
            continue
        fault = faults.get(match.group(1), faults.get("*"))
        if fault == "fail-all":
            sys.stderr.write("input.mlir:1:1: error: injected failure for this candidate\n")
            sys.exit(1)
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "hang":
            time.sleep(3600)
    os.execv(REAL_COMPILER, [REAL_COMPILER, *sys.argv[1:]])


if __name__ == "__main__":
    main()
