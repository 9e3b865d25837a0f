"""Output folders: one new folder per run, never shared between two runs."""

from __future__ import annotations

import datetime
import os
import re
import secrets
from pathlib import Path


def create_run_dir(parent: Path, label: str) -> Path:
    """Create `parent/<label>_<UTC timestamp>_<random>`; creation is exclusive, so no collisions."""
    parent.mkdir(parents=True, exist_ok=True)
    safe_label = re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:80]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d_%H%M%S")
    while True:
        candidate = parent / f"{safe_label}_{stamp}_{secrets.token_hex(3)}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
