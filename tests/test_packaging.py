"""The package declares every distribution it imports."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_top_level_modules() -> set[str]:
    modules = set()
    for path in (ROOT / "ireetune").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"ireetune"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_distribution_is_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # An optional extra (`ray`) declares what only its feature imports; `test` is no feature.
    extras = [
        r for name, rs in project["optional-dependencies"].items() if name != "test" for r in rs
    ]
    declared = {
        _normalise(re.split(r"[<>=!~;\[ ]", requirement)[0])
        for requirement in [*project["dependencies"], *extras]
    }
    distributions = packages_distributions()
    undeclared = sorted(
        module
        for module in _imported_top_level_modules()
        if not {_normalise(d) for d in distributions.get(module, [module])} & declared
    )
    assert undeclared == []


def test_every_html_template_ships_as_package_data() -> None:
    # A wheel (`pip install .`, not editable) holds only the data files that package-data names;
    # a template left out would fail every report of an installed ireetune.
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    shipped = {
        path
        for package, patterns in package_data.items()
        for pattern in patterns
        for path in (ROOT / package.replace(".", "/")).glob(pattern)
    }
    templates = {path for path in (ROOT / "ireetune/report/templates").rglob("*") if path.is_file()}
    assert len(templates) >= 2
    assert sorted(templates - shipped) == []
