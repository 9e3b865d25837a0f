"""`ireetune ranker train|explain` (alias `ireetune model`): the ranker, the learned cost model
that orders candidates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ireetune.core.arguments import positive_int, seed, user_path
from ireetune.core.errors import IreetuneError

# Features whose share of the ranker's split gain is below this are summed into one line.
SHOWN_SHARE = 0.01


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "ranker",
        aliases=["model"],
        help="train the ranker (the learned cost model that orders candidates), or show what it "
        "learned",
    )
    database_help = (
        "database file whose folder keeps the rankers (default: $IREETUNE_DB, else the user cache)"
    )
    actions = parser.add_subparsers(dest="ranker_command", required=True, parser_class=type(parser))
    train = actions.add_parser(
        "train",
        help="train one ranker per feature family from the database and recorded spaces; the "
        "tuner then orders with it",
    )
    train.add_argument(
        "--spaces", type=user_path, action="append", default=[],
        help="a folder of recorded spaces (data/spaces/cpu); repeatable",
    )  # fmt: skip
    train.add_argument(
        "--seed", type=seed, default=0, help="seed of the training (same seed, same ranker)"
    )
    explain = actions.add_parser("explain", help="the features that matter to each stored ranker")
    explain.add_argument("--top", type=positive_int, default=12, help="features shown per ranker")
    for action in (train, explain):
        action.add_argument("--db", type=user_path, default=None, help=database_help)
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace) -> int:
    from ireetune.database.ranker_files import ranker_folder
    from ireetune.database.schema import check_database_file
    from ireetune.database.store import default_database_path

    database_path = arguments.db or default_database_path()
    check_database_file(database_path)
    folder = ranker_folder(database_path)
    if arguments.ranker_command == "train":
        return _train(database_path, folder, arguments.spaces, arguments.seed)
    return _explain(folder, arguments.top)


def _train(database_path: Path, folder: Path, space_folders: list[Path], seed: int) -> int:
    from ireetune.database.store import TuningDatabase
    from ireetune.search.ranker import explain_ranker
    from ireetune.search.ranker_training import train_pinned_rankers
    from ireetune.search.recorded import load_recorded_spaces

    spaces = [
        space for space_folder in space_folders for space in load_recorded_spaces(space_folder)
    ]
    results = []
    if database_path.exists():
        # Training only reads the results: the file is opened read-only and left as it was.
        with TuningDatabase(database_path, read_only=True) as database:
            results = list(database.all_results())
    trained = train_pinned_rankers(results, folder, spaces, seed)
    for path, ranker in trained:
        top = ", ".join(name for name, _ in explain_ranker(ranker)[:5])
        sys.stdout.write(
            f"{ranker.family}: {len(ranker.groups)} problems, {ranker.rows} candidates -> {path} "
            f"({path.stat().st_size / 1024:.0f} KiB); leading features: {top}\n"
        )
    return 0


def _explain(folder: Path, top: int) -> int:
    from ireetune.search.ranker import explain_ranker, load_ranker

    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        raise IreetuneError(
            f"no cost model in {folder}: run `ireetune ranker train --spaces DIR`, or tune until "
            "the database holds enough measured problems"
        )
    for path in paths:
        ranker = load_ranker(path)
        sys.stdout.write(
            f"{path.name}: {ranker.family}, trained {ranker.trained_at} on {len(ranker.groups)} "
            f"problems ({ranker.rows} candidates), {path.stat().st_size / 1024:.0f} KiB\n"
        )
        shares = explain_ranker(ranker)
        shown = [item for item in shares[:top] if item[1] >= SHOWN_SHARE]
        for name, share in shown:
            sys.stdout.write(f"  {share:6.1%}  {name}\n")
        rest = sum(share for _, share in shares[len(shown) :])
        if rest > 0:
            sys.stdout.write(f"  {rest:6.1%}  the other {len(shares) - len(shown)} features\n")
    return 0
