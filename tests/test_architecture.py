"""The package's shape, read from the AST of `ireetune/` (docs/architecture.md, "Layers").

- No top-level unit (a package such as `search/`, or a module such as `flows/dispatch/tuner.py`) takes
  part in an import cycle.
- Every import goes down the layers of `LAYERS`, or stays within one layer.
- Each option is declared once (`find_option_declarations`).
- No function takes more than `MAX_PARAMETERS` parameters and no module is longer than
  `MAX_LINES` lines, except the ones listed today; the lists may only shrink.

Imports count when they run on import: module-level statements, also inside `try`, `with` and
`if` blocks, but not inside `if TYPE_CHECKING:` (type-only) nor in a function's body.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import ireetune

PACKAGE = Path(ireetune.__file__).parent

# Each top-level unit of `ireetune/` and its layer: a unit may import its own layer and the ones
# below it, never one above. A new top-level unit must be placed here (and in the picture of
# docs/architecture.md).
CORE, FLOWS, INTERFACE, COMMAND_LINE = 0, 15, 16, 17
LAYERS: dict[str, int] = {
    # The core: the records and protocols every stage shares (ireetune/core/: knobs, candidate
    # and run records, the target protocol, atomic file writing), the op families a problem is
    # (the target protocol speaks of problems), and leaf helpers that import nothing above them.
    "__init__": CORE,
    "core": CORE,
    "problem": CORE,
    # The stages, each importing only the ones below it.
    "benchmark": 1,
    "decision": 2,
    "database": 3,
    "report": 5,
    "compile": 6,
    "verify": 7,
    "frontend": 8,
    "targets": 9,
    "spec": 10,
    "search": 11,
    "model": 12,
    "flags": 13,
    "executor": 14,
    # The flows, which run the stages in order (a flow may call another: the model flow tunes
    # each hot dispatch with the dispatch flow).
    # The options each flow is run with (declared once; the parser is generated from them).
    "flows": FLOWS,
    "profiler": FLOWS,
    # What a user calls: the Python API and the command handlers, then the command line.
    "api": INTERFACE,
    "commands": INTERFACE,
    "cli": COMMAND_LINE,
}

MAX_PARAMETERS = 7
MAX_LINES = 600

# Today's functions with more than MAX_PARAMETERS parameters (self and cls not counted), by
# qualified name. A listed function may lose parameters; once it is within the limit it must
# leave this list, and no function may join it.
WIDE_FUNCTIONS: dict[str, int] = {}

# Today's modules longer than MAX_LINES lines, by path under ireetune/; the same ratchet.
LONG_MODULES: dict[str, int] = {}


@dataclass(frozen=True)
class Import:
    """One module-level import of a module of the package by another."""

    importer: str
    imported: str
    line: int

    def describe(self) -> str:
        return f"{self.importer} imports {self.imported} (line {self.line})"


def module_name(path: Path, root: Path) -> str:
    """Name the module at `path` of the package at `root` (`ireetune.search.learned_order`)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def unit_of(module: str) -> str:
    """Name the top-level unit a module belongs to (`search`; `__init__` for the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _runtime_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Yield the statements that run when the module is imported, type-only blocks left out."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(statement.test):
                yield from _runtime_statements(statement.body)
            yield from _runtime_statements(statement.orelse)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, statement.orelse, statement.finalbody):
                yield from _runtime_statements(block)
            for handler in statement.handlers:
                yield from _runtime_statements(handler.body)
        elif isinstance(statement, ast.With):
            yield from _runtime_statements(statement.body)


@functools.cache
def read_imports(root: Path, every_kind: bool = False) -> list[Import]:
    """Read every module-level import of one module of the package by another (once per root);
    with `every_kind`, type-only imports and those inside functions (lazy) as well."""
    modules = {module_name(path, root): path for path in root.rglob("*.py")}
    package = root.name
    imports = []
    for importer, path in sorted(modules.items()):
        tree = ast.parse(path.read_text(), str(path))
        statements = ast.walk(tree) if every_kind else _runtime_statements(tree.body)
        for statement in statements:
            if isinstance(statement, ast.Import):
                targets = [alias.name for alias in statement.names]
            elif isinstance(statement, ast.ImportFrom):
                if statement.level:
                    base = importer.split(".")
                    if path.name != "__init__.py":
                        base = base[:-1]
                    base = base[: len(base) - (statement.level - 1)]
                    source = ".".join([*base, *([statement.module] if statement.module else [])])
                else:
                    source = statement.module or ""
                # `from ireetune.search import learned_order` imports a module, not a name.
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    for alias in statement.names
                ]
            else:
                continue
            for target in targets:
                if target == package or target.startswith(package + "."):
                    imports.append(Import(importer, target, statement.lineno))
    return imports


def find_cycles(imports: list[Import]) -> list[list[str]]:
    """Return the groups of top-level units that import each other in a cycle."""
    graph: dict[str, set[str]] = defaultdict(set)
    for item in imports:
        if unit_of(item.importer) != unit_of(item.imported):
            graph[unit_of(item.importer)].add(unit_of(item.imported))
    return circles_of(graph)


def find_file_circles(imports: list[Import]) -> list[list[str]]:
    """Return the groups of modules (files) that import each other in a circle."""
    graph: dict[str, set[str]] = defaultdict(set)
    for item in imports:
        if item.importer != item.imported:
            graph[item.importer].add(item.imported)
    return circles_of(graph)


def circles_of(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Return the groups of nodes of `graph` that reach each other (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for other in sorted(graph.get(unit, ())):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in on_stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == unit:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return cycles


def find_upward_imports(imports: list[Import], layers: Mapping[str, int]) -> list[str]:
    """Describe every import from a lower layer into a higher one."""
    return [
        f"{item.describe()}: layer {layers[unit_of(item.importer)]} ({unit_of(item.importer)}) "
        f"may not import layer {layers[unit_of(item.imported)]} ({unit_of(item.imported)})"
        for item in imports
        if layers[unit_of(item.importer)] < layers[unit_of(item.imported)]
    ]


def count_parameters(root: Path) -> dict[str, int]:
    """Count every function's parameters (self and cls left out), by qualified name."""
    counts: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = child.args
                names = [
                    a.arg
                    for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                    if a.arg not in ("self", "cls")
                ]
                counts[f"{prefix}{child.name}"] = len(names)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text(), str(path)), module_name(path, root) + ".")
    return counts


def count_lines(root: Path) -> dict[str, int]:
    """Count every module's lines, by path under the package."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def check_ratchet(measured: Mapping[str, int], listed: Mapping[str, int], limit: int) -> list[str]:
    """Name what breaks a limit's ratchet: a new excess, a listed one that grew, a listed one
    that is now within the limit (or gone) and must leave the list."""
    problems = []
    for name, value in sorted(measured.items()):
        if value > limit and name not in listed:
            problems.append(f"{name}: {value}, over the limit of {limit}")
        elif name in listed and value > listed[name]:
            problems.append(f"{name}: {value}, more than the {listed[name]} listed")
    for name in sorted(listed):
        if measured.get(name, 0) <= limit:
            problems.append(f"{name}: now within the limit of {limit}; remove it from the list")
    return problems


def test_no_top_level_unit_takes_part_in_an_import_cycle() -> None:
    imports = read_imports(PACKAGE)
    cycles = find_cycles(imports)
    between = [
        item.describe()
        for item in imports
        for group in cycles
        if unit_of(item.importer) in group
        and unit_of(item.imported) in group
        and unit_of(item.importer) != unit_of(item.imported)
    ]
    assert (cycles, between) == ([], [])


def test_no_two_files_import_each_other_by_any_kind_of_import() -> None:
    # Module level, type-only and lazy imports alike: a circle of files is one room split in two.
    assert find_file_circles(read_imports(PACKAGE, every_kind=True)) == []


MAX_ROOT_ENTRIES = 20


def root_entries(root: Path) -> list[str]:
    """Name the entries of the package's root a newcomer reads (not `__init__.py`, `py.typed`)."""
    return sorted(
        entry.name
        for entry in root.iterdir()
        if entry.name not in {"__init__.py", "py.typed", "__pycache__"}
        and not entry.name.startswith(".")
    )


def test_the_root_holds_at_most_twenty_entries() -> None:
    entries = root_entries(PACKAGE)
    assert len(entries) <= MAX_ROOT_ENTRIES, entries


def test_the_file_check_finds_a_lazy_and_a_type_only_circle(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "a.py": "def f():\n    from shop import b\n",
            "b.py": "from shop import a\n",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from shop.d import x\n",
            "d.py": "from shop.c import y\n",
            "e.py": "from shop import a\n",
        },
    )
    assert find_file_circles(read_imports(package)) == []
    assert find_file_circles(read_imports(package, every_kind=True)) == [
        ["shop.a", "shop.b"],
        ["shop.c", "shop.d"],
    ]
    assert len(root_entries(package)) == 5


def test_every_top_level_unit_has_a_layer() -> None:
    units = {unit_of(module_name(path, PACKAGE)) for path in PACKAGE.rglob("*.py")}
    assert (sorted(units - set(LAYERS)), sorted(set(LAYERS) - units)) == ([], [])


def test_every_import_goes_down_the_layers() -> None:
    assert find_upward_imports(read_imports(PACKAGE), LAYERS) == []


def test_no_new_function_takes_more_than_seven_parameters() -> None:
    assert check_ratchet(count_parameters(PACKAGE), WIDE_FUNCTIONS, MAX_PARAMETERS) == []


def test_no_new_module_is_longer_than_six_hundred_lines() -> None:
    assert check_ratchet(count_lines(PACKAGE), LONG_MODULES, MAX_LINES) == []


# The checks themselves, on a small package written for the purpose: each must fail when broken.


def _write_package(root: Path, files: Mapping[str, str]) -> Path:
    package = root / "shop"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_checks_find_a_cycle_and_an_upward_import_but_not_a_type_only_one(
    tmp_path: Path,
) -> None:
    package = _write_package(
        tmp_path,
        {
            "core.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from shop.flow import run\n",
            "stage/__init__.py": "",
            "stage/cut.py": "from shop import core\nfrom shop.flow import run\n",
            "flow.py": "try:\n    from .stage.cut import cut\nexcept ImportError:\n    pass\n",
        },
    )
    imports = read_imports(package)
    assert find_cycles(imports) == [["flow", "stage"]]
    assert find_upward_imports(imports, {"__init__": 0, "core": 0, "stage": 1, "flow": 2}) == [
        "shop.stage.cut imports shop.flow (line 2): layer 1 (stage) may not import layer 2 (flow)"
    ]


def test_the_ratchets_refuse_new_grown_and_stale_entries(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "wide.py": "class Shop:\n"
            "    def sell(self, a, b, c, d, e, f, g, h): ...\n"
            "def buy(a, b, c, d, e, f, g, h, i): ...\n"
            "def pay(a, b): ...\n",
        },
    )
    counts = count_parameters(package)
    assert counts == {"shop.wide.Shop.sell": 8, "shop.wide.buy": 9, "shop.wide.pay": 2}
    listed = {"shop.wide.buy": 8, "shop.wide.pay": 9}
    assert check_ratchet(counts, listed, 7) == [
        "shop.wide.Shop.sell: 8, over the limit of 7",
        "shop.wide.buy: 9, more than the 8 listed",
        "shop.wide.pay: now within the limit of 7; remove it from the list",
    ]
    assert count_lines(package) == {"__init__.py": 0, "wide.py": 4}


# The calls of core/options.py that declare an option's constraint (its argument type and action).
_DECLARERS = {"option", "setting", "added_option"}


def find_option_declarations(root: Path) -> dict[str, list[str]]:
    """Return, for each option (by its field name), where it is declared.

    An option is declared where its constraint is written:
    - a class-level annotated field whose value is a direct call of `option`, `setting` or
      `added_option` (core/options.py), in any class: `rounds: int = option(5, ...)`;
    - a class-level annotated field of a run file's options model, a class whose name ends in
      `OptionsFile`: a file model that re-declares the options instead of deriving from them.

    A field whose value is a shared factory (`num_candidates_option(24, ...)`, in
    core/common_options.py) uses the factory's one declaration and counts nowhere: a command's
    default and help may differ there, its constraint may not. A factory is named for its
    option and holds the one `option(...)` call of it.
    """
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for field in node.body:
                if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
                    continue
                value = field.value
                declared = (
                    isinstance(value, ast.Call)
                    and isinstance(value.func, ast.Name)
                    and value.func.id in _DECLARERS
                )
                if declared or node.name.endswith("OptionsFile"):
                    found[field.target.id].append(f"{module}.{node.name}")
    return dict(found)


def test_each_option_is_declared_once() -> None:
    declarations = find_option_declarations(PACKAGE)
    assert "num_candidates" not in declarations, "declared by core/common_options' factory"
    twice = {name: where for name, where in declarations.items() if len(where) > 1}
    assert twice == {}


def test_the_option_check_finds_an_option_declared_twice(tmp_path: Path) -> None:
    package = _write_package(
        tmp_path,
        {
            "options.py": "class RunOptions:\n"
            "    rounds: int = option(5, flag='--rounds')\n"
            "    seed: int = seed_option()\n"
            "    label = 'run'\n"
            "class ShopOptions:\n"
            "    rounds: int = option(7, flag='--rounds')\n"
            "class RunOptionsFile:\n"
            "    seed: int\n",
        },
    )
    assert find_option_declarations(package) == {
        "rounds": ["shop.options.RunOptions", "shop.options.ShopOptions"],
        "seed": ["shop.options.RunOptionsFile"],
    }


# The target protocol stays small (docs/architecture.md, "Roles"): what is not the protocol is a
# free function or a role of its own (spaces, the feature extractor).
MAX_TARGET_MEMBERS = 15


def count_class_members(path: Path, class_name: str) -> int:
    """Count what a class declares in its body: its functions (properties among them) and its
    assigned attributes, as `house_metrics.py` counts the target protocol."""
    tree = ast.parse(path.read_text())
    (found,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == class_name
    ]
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign, ast.Assign)
    return sum(isinstance(statement, kinds) for statement in found.body)


def test_the_target_protocol_has_at_most_fifteen_members() -> None:
    assert count_class_members(PACKAGE / "core" / "target.py", "Target") <= MAX_TARGET_MEMBERS


def test_the_member_count_sees_methods_properties_and_attributes(tmp_path: Path) -> None:
    path = tmp_path / "role.py"
    path.write_text(
        "class Role:\n"
        '    """Not counted."""\n'
        "    flags: tuple[str, ...] = ()\n"
        "    traits = None\n"
        "    @property\n"
        "    def name(self) -> str:\n"
        "        return ''\n"
        "    def run(self) -> None:\n"
        "        pass\n"
        "    async def wait(self) -> None:\n"
        "        pass\n"
    )
    assert count_class_members(path, "Role") == 5
