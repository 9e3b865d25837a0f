"""Compare the candidates of two compiled run folders: knobs and binaries, in order.

A binary embeds the path of its run folder (and the ZIP CRC-32 fields that cover it), so two runs
of the same code in two folders never hash alike. This masks the folder's own path and zeroes
those CRC fields before hashing, so that what remains compares the compiled code. Used to check
that a restructuring changed no candidate (issue 23):

    PYTHONPATH=OLD_CHECKOUT ireetune tune-dispatch examples/matmul.mlir --target cpu --seed 7 \
        --num-candidates 8 --stop-after compile --output-dir /tmp/fpold --no-db
    ireetune tune-dispatch examples/matmul.mlir --target cpu --seed 7 \
        --num-candidates 8 --stop-after compile --output-dir /tmp/fpnew --no-db
    python bench/same_candidates.py /tmp/fpold/RUN /tmp/fpnew/RUN

Give both runs output folders of the same length (as above), so the masked paths line up. The
binaries' debug-string table is ordered by the strings' contents, so two runs whose folder names
differ (each carries its time of creation) can still differ in a few bytes: for a byte-exact
comparison compile both at the same folder path (run one, move its folder away, run the other
with `ireetune.core.run_dir.create_run_dir` giving the same name, then compare the two moved folders).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path


def fingerprint(run_dir: Path) -> list[tuple[str, str]]:
    """Return each candidate's knobs (as JSON) and its masked binary hash, in candidate order."""
    run_dir = run_dir.resolve()
    results = json.loads((run_dir / "results.json").read_text())
    own_path = str(run_dir).encode()
    rows = []
    for candidate in results["candidates"]:
        data = bytearray(
            (run_dir / candidate["binary_path"])
            .read_bytes()
            .replace(own_path, b"X" * len(own_path))
        )
        for header in re.finditer(rb"PK\x03\x04", bytes(data)):
            data[header.start() + 14 : header.start() + 18] = bytes(4)
        for header in re.finditer(rb"PK\x01\x02", bytes(data)):
            data[header.start() + 16 : header.start() + 20] = bytes(4)
        knobs = json.dumps(candidate.get("knobs"), sort_keys=True)
        rows.append((knobs, hashlib.sha256(bytes(data)).hexdigest()))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    arguments = parser.parse_args()
    before, after = fingerprint(arguments.before), fingerprint(arguments.after)
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        mark = "same" if old == new else "DIFFERENT"
        print(f"{index:3d} {mark:9s} {new[0]} {new[1][:16]}")
    same = before == after
    print(f"{len(before)} vs {len(after)} candidates: {'identical' if same else 'they differ'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
