#!/usr/bin/env python3
"""An iree-compile stand-in that fails every candidate's compile but the baseline's.

Used through IREETUNE_IREE_COMPILE: it runs the real compiler for candidate 0 (and anything not
compiled with a candidate spec) and fails like a compiler crash for every other spec.
"""

from __future__ import annotations

import os
import re
import sys

REAL_COMPILER = os.environ["FAULT_REAL_IREE_COMPILE"]


def main() -> None:
    for argument in sys.argv[1:]:
        match = re.search(r"specs/(\d+)_spec\.mlir$", argument)
        if match and match.group(1) != "0":
            sys.stderr.write("input.mlir:1:1: error: injected failure for this candidate\n")
            sys.exit(1)
    os.execv(REAL_COMPILER, [REAL_COMPILER, *sys.argv[1:]])


if __name__ == "__main__":
    main()
