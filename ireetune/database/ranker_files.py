"""The files of the rankers (the learned cost models that order candidates), beside the tuning
database.

They live in `<database folder>/rankers/`, one JSON file each (a few tens of kilobytes; the
folder keeps the name it had before the cost model was called the ranker):

- `<family>.json`: a ranker trained on purpose with `ireetune ranker train` (from the database
  and, optionally, recorded spaces); when present, the tuner uses it;
- `<family>-auto-<fingerprint>.json`: a ranker the tuner trained by itself from the database's
  rows for this target, once there were enough; the fingerprint is a hash of the training rows,
  so a grown database trains a new one (in a second) and an unchanged one reuses the file;
- `facts/<target>.json`: the machine facts of each target key the tuner has run on, so that
  `ireetune ranker train` can compute the features of the database's rows without a dispatch.

A ranker file's own format is written and read by `search/ranker.py`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from ireetune.core.files import write_text_atomically
from ireetune.core.target import FactValue

logger = logging.getLogger(__name__)


def ranker_folder(database_path: Path) -> Path:
    """Return the folder beside the database where its rankers are kept (`rankers/`, the name
    it has always had)."""
    return database_path.parent / "models"


def _file_stem(family: str) -> str:
    return family.replace("/", "_")


def pinned_ranker_path(folder: Path, family: str) -> Path:
    """Return where `ireetune ranker train` keeps the ranker of a feature family."""
    return folder / f"{_file_stem(family)}.json"


def auto_ranker_path(folder: Path, family: str, fingerprint: str) -> Path:
    """Return where the tuner keeps a ranker it trained by itself on rows with `fingerprint`."""
    return folder / f"{_file_stem(family)}-auto-{fingerprint}.json"


def remember_machine_facts(folder: Path, target_key: str, facts: Mapping[str, FactValue]) -> None:
    """Keep a target key's machine facts beside the rankers (best effort: a cache)."""
    if not facts:
        return
    digest = hashlib.sha256(target_key.encode()).hexdigest()[:16]
    path = folder / "facts" / f"{digest}.json"
    text = json.dumps({"target": target_key, "facts": dict(facts)}, sort_keys=True)
    try:
        if path.is_file() and path.read_text() == text:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, text)
    except OSError as error:
        logger.warning("could not keep machine facts in %s: %s", folder, error)


def remembered_machine_facts(folder: Path) -> dict[str, dict[str, FactValue]]:
    """Return the machine facts kept for each target key."""
    known: dict[str, dict[str, FactValue]] = {}
    for path in sorted((folder / "facts").glob("*.json")):
        try:
            document = json.loads(path.read_text())
            known[str(document["target"])] = dict(document["facts"])
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("ignoring damaged machine facts %s", path)
    return known
