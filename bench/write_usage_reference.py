"""Rewrite the generated command reference in docs/usage.md from the command-line parser.

    python bench/write_usage_reference.py

Run it after changing any command or flag; tests/test_usage_docs.py fails until you do.
"""

from __future__ import annotations

from pathlib import Path

from ireetune.cli import build_parser
from ireetune.commands.usage_reference import render_usage_reference, replace_generated_section

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def main() -> None:
    reference = render_usage_reference(build_parser())
    USAGE.write_text(replace_generated_section(USAGE.read_text(), reference))
    print(f"wrote the command reference into {USAGE}")


if __name__ == "__main__":
    main()
