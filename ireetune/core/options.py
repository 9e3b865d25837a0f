"""Declare each command's options once, as dataclass fields, and generate the parser from them.

A field declared with `option(...)` carries its command-line flag, help text, argparse type,
choices and action in its metadata:

    num_candidates: int = option(32, flag="--num-candidates", type=positive_int,
                                 help="candidate configurations to try")

`add_options(parser, TuneOptions)` adds one argument per such field, in field order, with the
field's name as its destination; `options_from_arguments(TuneOptions, namespace)` builds the
dataclass back from the parsed namespace. Fields without `option` metadata are not on the
command line (they keep their defaults, or the caller passes them). Enum choices are shown and
parsed by their values and become enum members; repeatable options become tuples. A flag
without a default is required (declare such fields in a `kw_only` dataclass, where they may
follow fields with defaults); a pair of flags gives an option a short spelling (`-o`); a field
declared with `added_option` takes its argument from a function that adds it to every parser
that has it (`--force`), so that the help keeps one place and the field its order.

A run folder stores a command's options and reads them back as untrusted data: each number
there passes the same argument type its option is declared with (`check_option_numbers`), so
a folder's bounds are the command line's. A field that is not on the command line but bounds
a number all the same is declared with `setting(default, type=...)`.

This module imports nothing heavy: the option dataclasses import it, and the parser (which every
command builds, the runtime-only device host's included) imports them.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, Literal, TypeVar

# How the flag takes its value: one value (store), repeatable (append: a tuple), a switch that
# sets True or False (store_true, store_false: `--no-db` for `use_database`), or a switch with a
# `--no-` twin (boolean_optional: `--online/--no-online`).
OptionAction = Literal["store", "append", "store_true", "store_false", "boolean_optional"]

_METADATA_KEY = "ireetune_option"
# A field that is no option but whose value passes an argument type (`setting`).
_SETTING_KEY = "ireetune_setting"

OptionsT = TypeVar("OptionsT")


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """How one dataclass field appears on the command line."""

    # `--num-candidates`, or a positional argument's name as the user sees it (`input`).
    flag: str
    help: str
    # The argparse type: parses and checks the value's text (core/arguments.py).
    value_type: Callable[[str], Any] | None = None
    choices: type[enum.Enum] | tuple[str, ...] | None = None
    action: OptionAction = "store"
    metavar: str | None = None
    # A second, short spelling shown first (`-o` of `-o/--output`).
    short_flag: str | None = None
    # Adds the argument itself, with the field's name as its destination (`add_force_argument`).
    add_argument: Callable[[argparse.ArgumentParser], None] | None = None

    @property
    def positional(self) -> bool:
        return not self.flag.startswith("-")


def option(
    default: Any = dataclasses.MISSING,
    *,
    flag: str | tuple[str, str],
    help: str,
    type: Callable[[str], Any] | None = None,
    choices: type[enum.Enum] | tuple[str, ...] | None = None,
    action: OptionAction = "store",
    metavar: str | None = None,
) -> Any:
    """Declare a dataclass field that is also a command-line option (no default: a positional,
    or a required option; two flags: a short spelling and the long one, `("-o", "--output")`)."""
    short_flag, long_flag = (None, flag) if isinstance(flag, str) else flag
    spec = OptionSpec(long_flag, help, type, choices, action, metavar, short_flag)
    return dataclasses.field(default=default, metadata={_METADATA_KEY: spec})


def added_option(default: Any, add_argument: Callable[[argparse.ArgumentParser], None]) -> Any:
    """Declare a dataclass field whose option `add_argument` adds (to this parser and others)."""
    spec = OptionSpec(flag="", help="", add_argument=add_argument)
    return dataclasses.field(default=default, metadata={_METADATA_KEY: spec})


def setting(default: Any, *, type: Callable[[str], Any]) -> Any:
    """Declare a dataclass field that is not on the command line but whose value passes the
    argument type `type` wherever it is read from a file (the bounds of a number)."""
    return dataclasses.field(default=default, metadata={_SETTING_KEY: type})


def value_type_of(options_class: type, name: str) -> Callable[[str], Any]:
    """Return the argument type field `name` of `options_class` is declared with (an option's
    or a setting's): what a file's value for it must pass."""
    (field,) = [f for f in dataclasses.fields(options_class) if f.name == name]
    spec = field.metadata.get(_METADATA_KEY)
    value_type = spec.value_type if spec is not None else field.metadata.get(_SETTING_KEY)
    assert value_type is not None, f"{options_class.__name__}.{name} declares no argument type"
    return value_type


def check_number(value: object, value_type: Callable[[str], Any]) -> str | None:
    """Say why a number read from a file is not one the command line takes (its argument type
    refuses its text), or None; anything but an int or a float is left to its file's model."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value_type(repr(value))
    except argparse.ArgumentTypeError as error:
        return str(error)
    return None


def check_option_numbers(options: object, where: str) -> None:
    """Refuse (ValueError naming `where.field`) a number of an options dataclass read from a
    file that its field's argument type refuses: a folder's numbers get the command line's
    bounds. A field's default always passes (`--jobs`' 0 means one compile per core); nested
    options dataclasses (the Ray settings) are checked the same way."""
    for field in dataclasses.fields(options):  # type: ignore[arg-type]
        value = getattr(options, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_option_numbers(value, f"{where}.{field.name}")
            continue
        spec = field.metadata.get(_METADATA_KEY)
        value_type = spec.value_type if spec is not None else field.metadata.get(_SETTING_KEY)
        if value_type is None or value == field.default:
            continue
        reason = check_number(value, value_type)
        if reason is not None:
            raise ValueError(f"{where}.{field.name} {reason}")


def option_fields(options_class: type) -> list[tuple[dataclasses.Field[Any], OptionSpec]]:
    """Return the fields of `options_class` that are command-line options, in field order."""
    return [
        (field, field.metadata[_METADATA_KEY])
        for field in dataclasses.fields(options_class)
        if _METADATA_KEY in field.metadata
    ]


def add_options(parser: argparse.ArgumentParser, options_class: type) -> None:
    """Add one argument per option field of `options_class`, its destination the field's name."""
    for field, spec in option_fields(options_class):
        if spec.add_argument is not None:
            spec.add_argument(parser)
            continue
        keywords: dict[str, Any] = {"help": spec.help}
        takes_value = spec.action in ("store", "append")
        if takes_value and spec.choices is None and not spec.positional:
            # The value is named for the flag, not the field (`--db DB`, not DATABASE_PATH).
            keywords["metavar"] = spec.metavar or spec.flag.lstrip("-").replace("-", "_").upper()
        if spec.value_type is not None:
            keywords["type"] = spec.value_type
        if isinstance(spec.choices, enum.EnumMeta):
            keywords["choices"] = tuple(member.value for member in spec.choices)
        elif spec.choices is not None:
            keywords["choices"] = spec.choices
        if spec.positional:
            assert field.default is dataclasses.MISSING, f"{field.name}: a positional is required"
            parser.add_argument(field.name, metavar=spec.flag, **keywords)
            continue
        flags = (spec.flag,) if spec.short_flag is None else (spec.short_flag, spec.flag)
        default = field.default
        if default is dataclasses.MISSING:
            assert spec.action == "store", f"{field.name}: only an option with a value is required"
            parser.add_argument(*flags, dest=field.name, required=True, **keywords)
            continue
        if spec.action == "append":
            assert default == (), f"{field.name}: a repeatable option starts empty"
            keywords.update(action="append", default=[])
        elif spec.action == "boolean_optional":
            keywords.update(action=argparse.BooleanOptionalAction, default=default)
        elif spec.action in ("store_true", "store_false"):
            assert default is (spec.action == "store_false"), f"{field.name}: default flipped"
            keywords.update(action=spec.action, default=default)
        else:
            # The parser shows and takes an enum by its value, and a default path as text, so
            # that the option's type checks it as it checks a path given (argparse applies the
            # type to a default that is text).
            if isinstance(default, enum.Enum):
                default = default.value
            elif isinstance(default, PurePath):
                default = str(default)
            keywords["default"] = default
        parser.add_argument(*flags, dest=field.name, **keywords)


def options_from_arguments(
    options_class: type[OptionsT], arguments: argparse.Namespace, **values: Any
) -> OptionsT:
    """Build `options_class` from parsed arguments; `values` gives its fields that are no options."""
    for field, spec in option_fields(options_class):
        assert field.name not in values, f"{field.name} is an option; the parser gives it"
        value = getattr(arguments, field.name)
        if isinstance(spec.choices, enum.EnumMeta) and value is not None:
            value = spec.choices(value)
        elif isinstance(value, list):
            value = tuple(value)
        values[field.name] = value
    return options_class(**values)


def options_from(options_class: type[OptionsT], source: object, **values: Any) -> OptionsT:
    """Build `options_class` (a stage's options) from the same-named fields of `source` (a
    command's options); `values` gives the fields `source` names otherwise."""
    for field in dataclasses.fields(options_class):  # type: ignore[arg-type]
        if field.name not in values:
            values[field.name] = getattr(source, field.name)
    return options_class(**values)
