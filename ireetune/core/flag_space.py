"""A target's global compiler options as data, and the flag sets a search proposes from them.

A flag set is what is added to every `iree-compile` command of a model; the empty set is the
compiler's default. The fixed proposals (`propose_flag_sets`) are, in this order: each choice of
each option alone (with the flags it needs to have any effect), then the combinations the target
declares useful. They seed the flag phase's search (`flags/strategy.py`), which then changes the
declared `TunedOption`s one at a time; the dispatch-level search tries the fixed proposals only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlagOption:
    """One global option and the choices worth trying, each spelled as the flags that set it.

    `requires` are flags without which the option has no effect (the op families eligible for
    data tiling matter only with data tiling on); they are added to every choice.
    """

    key: str
    choices: tuple[tuple[str, ...], ...]
    why: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlagSet:
    """Flags added to every compile of a model; empty means the compiler's defaults."""

    flags: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """Name the set as it is typed: `--iree-opt-data-tiling --iree-...` or `default`."""
        return " ".join(self.flags) if self.flags else "default"


@dataclass(frozen=True)
class FlagSpace:
    """A target's searchable options and the combinations of them known to be useful."""

    options: tuple[FlagOption, ...]
    combinations: tuple[tuple[str, ...], ...] = ()
    # The options the search changes one at a time, seeded by the sets above (the flag phase of
    # `ireetune tune`; the dispatch-level search tries only the sets above).
    tuned: tuple[TunedOption, ...] = ()
    # The runtime options of the target's device, searched on the winning binary.
    runtime: tuple[RuntimeOption, ...] = ()


DEFAULT_FLAGS = FlagSet()


def make_flag_set(flags: Iterable[str]) -> FlagSet:
    """Build a flag set, dropping repeated flags and keeping the first spelling's order."""
    return FlagSet(tuple(dict.fromkeys(flags)))


def propose_flag_sets(space: FlagSpace, limit: int) -> list[FlagSet]:
    """Return up to `limit` distinct non-default flag sets: singles first, then combinations."""
    proposals: list[FlagSet] = []
    for option in space.options:
        for choice in option.choices:
            proposals.append(make_flag_set((*option.requires, *choice)))
    proposals.extend(make_flag_set(combination) for combination in space.combinations)
    distinct = list(dict.fromkeys(p for p in proposals if p.flags))
    return distinct[: max(0, limit)]


# Options the search changes one at a time (`flags/strategy.py`), as a configuration: option
# name (the flag without its value) to value, in the order the options were set. A name that is
# absent has the compiler's default. A boolean set to true is spelled without a value; a list
# option (its value comma-separated here) repeats its flag once per item.
Configuration = dict[str, str]


@dataclass(frozen=True)
class TunedOption:
    """One compiler option the search may change: the values worth trying and the default.

    `depends_on` names (option, value) pairs without which the option changes nothing (the
    mmt4d ukernel matters only with data tiling on): setting the option sets them too, and
    resetting one of them resets the option.
    """

    name: str
    values: tuple[str, ...]
    default: str
    why: str
    depends_on: tuple[tuple[str, str], ...] = ()
    is_list: bool = False


@dataclass(frozen=True)
class RuntimeOption:
    """One runtime option of a device (`--task_topology_max_group_count`), its values worth
    trying and the runtime's default; read when the device is created."""

    name: str
    values: tuple[str, ...]
    default: str
    why: str


def spell_configuration(
    configuration: Configuration, options: Sequence[TunedOption] = ()
) -> FlagSet:
    """Spell a configuration as the flags that set it (`{"--a": "true", "--b": "4"}` becomes
    `--a --b=4`)."""
    lists = {option.name for option in options if option.is_list}
    flags: list[str] = []
    for name, value in configuration.items():
        if name in lists:
            flags.extend(f"{name}={item}" for item in value.split(","))
        elif value == "true":
            flags.append(name)
        else:
            flags.append(f"{name}={value}")
    return FlagSet(tuple(flags))


def parse_configuration(flag_set: FlagSet) -> Configuration:
    """Read a flag set back as a configuration (the inverse of `spell_configuration`)."""
    configuration: Configuration = {}
    for flag in flag_set.flags:
        name, has_value, value = flag.partition("=")
        value = value if has_value else "true"
        configuration[name] = f"{configuration[name]},{value}" if name in configuration else value
    return configuration


def list_tuned_flags(options: Sequence[TunedOption]) -> frozenset[str]:
    """Return every flag the options can be spelled as (their values and dependencies)."""
    flags: set[str] = set()
    for option in options:
        for value in option.values:
            flags.update(spell_configuration({option.name: value}, options).flags)
        for name, value in option.depends_on:
            flags.update(spell_configuration({name: value}, options).flags)
    return frozenset(flags)
