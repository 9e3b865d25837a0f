"""The one atomic file writer (ireetune/core/files.py): whole files, never halves, no leftovers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ireetune.core.files import temporary_beside, write_bytes_atomically, write_text_atomically


def test_a_written_file_replaces_the_old_one_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("old\n")
    write_text_atomically(path, "new\n")
    write_bytes_atomically(tmp_path / "binary.vmfb", b"\x00\x01")
    assert (path.read_text(), (tmp_path / "binary.vmfb").read_bytes()) == ("new\n", b"\x00\x01")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["binary.vmfb", "results.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), temporary_beside(path) as temporary:
        temporary.write_text("half")
        raise RuntimeError("the writer failed")
    assert (path.read_text(), sorted(p.name for p in tmp_path.iterdir())) == (
        "old\n",
        ["results.json"],
    )


def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        write_text_atomically(tmp_path / "summary.txt", "text\n")
    finally:
        os.umask(previous)
    assert (tmp_path / "summary.txt").stat().st_mode & 0o777 == 0o640


def test_concurrent_writers_of_one_file_never_collide(tmp_path: Path) -> None:
    # Several threads rewrite one file at once (a node's tasks, the recorder and a cache): each
    # must succeed, and the file must be one writer's whole content. A shared temporary name
    # made them write into each other's file and rename it away under one another.
    path = tmp_path / "meta.json"
    contents = [f"{'x' * 20000}{number}\n" for number in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(40):
                write_text_atomically(path, text)
        except BaseException as error:  # noqa: BLE001 - collected for the assertion below.
            errors.append(error)

    threads = [threading.Thread(target=write, args=(text,)) for text in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert path.read_text() in contents
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]
