"""Typed configs, one mechanism for both halves: command-line flags generated from frozen dataclasses, and dicts
(a run's recorded config) read back into them with unknown keys refused.

In:  a `@dataclass(frozen=True, kw_only=True)` whose fields carry a docstring each (the string literal under
     the field, as in trainer/config.py), optionally declared with `flag(...)` for what a name and a type
     cannot say (another flag name, choices, a conversion); nested config dataclasses are flattened.
Out: `add_flags(parser, cls)` adds one flag per field, its help the field's docstring and its default;
     `from_flags(cls, namespace)` builds the config from the parsed flags; `from_dict(cls, body)` builds it
     from a dict (nested dicts for nested configs, lists for tuples) and names the valid keys when one is not.

A field is written once: its name, type, default, help and choices live on the dataclass, so `--help` cannot
drift from the config (torchtitan's CLI works the same way). Flag names follow the field (`vocab_size` →
`--vocab-size`); a bool defaulting to False is a switch (`--strict`), one defaulting to True a negative
switch (`--no-verify-checksums`, or the name given, e.g. `--cased` for `lowercase`); a `tuple[...]` field is
a repeatable flag. Validation stays in each dataclass's `__post_init__`, whose messages name the flags; `check_choices` there checks
every declared choice.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from collections.abc import Callable
from typing import Any

_FLAG = "clozeforge.flag"
_METAVARS = {int: "N", float: "X"}


@dataclasses.dataclass(frozen=True)
class _Flag:
    name: str | None = None
    """The flag's spelling when it is not the field's name (`--masking` for MaskingConfig.strategy)."""
    choices: tuple | None = None
    metavar: str | None = None
    convert: Callable[[Any], Any] | None = None
    """Applied to the parsed value (the list of values for a repeatable flag) before the config is built."""
    hidden: bool = False
    """Not a flag at all (set by code or a config file only)."""
    doc_from: tuple[type, str] | None = None
    """Take the help from another config's field, where the same setting is documented."""
    aliases: tuple[str, ...] = ()
    """Other spellings of the same flag, for a user who reaches for another tool's name (`--text-column`)."""


def flag(default: Any = dataclasses.MISSING, *, name: str | None = None, choices: tuple | None = None,
         metavar: str | None = None, convert: Callable[[Any], Any] | None = None, hidden: bool = False,
         doc_from: tuple[type, str] | None = None, default_factory: Any = dataclasses.MISSING,
         aliases: tuple[str, ...] = ()) -> Any:
    """A dataclass field with what its flag needs beyond the name, type and docstring of the field."""
    meta = {_FLAG: _Flag(name, choices, metavar, convert, hidden, doc_from, aliases)}
    if doc_from is not None and default is dataclasses.MISSING and default_factory is dataclasses.MISSING:
        default = _field(*doc_from).default
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta)


def _field(cls: type, name: str) -> dataclasses.Field:
    return {f.name: f for f in dataclasses.fields(cls)}[name]


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: its docstring} from the class source (the string literal right after each annotated field)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # no source (a frozen app): flags keep their defaults as help
            continue
        body = tree.body[0].body
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def _spec(f: dataclasses.Field) -> _Flag:
    return f.metadata.get(_FLAG, _Flag())


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type inside an Optional, whether None is allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else str), True
    return hint, False


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _help(cls: type, f: dataclasses.Field, spec: _Flag, default: Any, option: str) -> str:
    source_cls, source_name = spec.doc_from or (cls, f.name)
    text = field_docs(source_cls).get(source_name, "")
    if default is True:
        text += f" (on by default; {option} turns it off)"
    elif not (default is dataclasses.MISSING or default is None or default is False or default == ()):
        text += f" (default: {default})"
    return text.replace("%", "%%")


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, *, prefix: str = "") -> None:
    """One flag per field of `cls` (nested config dataclasses flattened, each in its own group of `--help`)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        spec, default = _spec(f), _default(f)
        hint, optional = _unwrap(hints[f.name])
        dest = prefix + f.name
        if spec.hidden:
            continue
        if dataclasses.is_dataclass(hint):
            title = (inspect.getdoc(hint) or hint.__name__).split("\n")[0]
            group = parser.add_argument_group(title) if isinstance(parser, argparse.ArgumentParser) else parser
            add_flags(group, hint, prefix=dest + ".")
            continue
        option = spec.name or "--" + f.name.replace("_", "-")
        if hint is bool and default is True:
            option = spec.name or "--no-" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"dest": dest, "help": _help(cls, f, spec, default, option)}
        if hint is bool:
            if default is True:
                kwargs.update(action="store_false", default=True)
            else:
                kwargs.update(action="store_true", default=False)
        elif typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[0]
            kwargs.update(action="append", default=None, type=item if item in (int, float, str) else str,
                          required=default is dataclasses.MISSING)
        else:
            kwargs.update(type=hint if hint in (int, float, str) else str, default=None if default is dataclasses.MISSING else default)
            if default is dataclasses.MISSING:
                kwargs["required"] = True
        if spec.choices is not None:
            kwargs["choices"] = spec.choices
        if spec.metavar is not None or (spec.choices is None and kwargs.get("type") in _METAVARS):
            kwargs["metavar"] = spec.metavar or _METAVARS[kwargs["type"]]
        parser.add_argument(option, *spec.aliases, **kwargs)


def from_flags(cls: type, namespace: argparse.Namespace, *, prefix: str = "") -> Any:
    """The config `add_flags(parser, cls)` describes, from `parser.parse_args()`'s namespace."""
    values = vars(namespace)
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        spec, hint = _spec(f), _unwrap(hints[f.name])[0]
        dest = prefix + f.name
        if spec.hidden:
            continue
        if dataclasses.is_dataclass(hint):
            kwargs[f.name] = from_flags(hint, namespace, prefix=dest + ".")
            continue
        value = values[dest]
        if typing.get_origin(hint) is tuple:
            value = tuple(value or ())
            if value == () and _default(f) not in (dataclasses.MISSING, ()):
                value = _default(f)
        if spec.convert is not None and value is not None:
            value = spec.convert(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def check_choices(config: Any, error: Callable[[str], Exception] = ValueError) -> None:
    """Refuse a field outside the choices its `flag(...)` declares: argparse checks a flag, this a config built
    from a dict (a recorded run) or by code, so the choices are declared once and checked by one function."""
    for f in dataclasses.fields(config):
        choices, value = _spec(f).choices, getattr(config, f.name)
        if choices is not None and value is not None and value not in choices:
            option = f"{_spec(f).name} ({f.name})" if _spec(f).name else "--" + f.name.replace("_", "-")
            raise error(f"{option} must be one of {', '.join(map(str, choices))}, got {value!r}")


def from_dict(cls: type, body: dict[str, Any], where: str = "") -> Any:
    """`cls` from a dict such as `dataclasses.asdict` makes: nested dicts for nested configs, lists for tuples.
    A key that is not a field is a ValueError naming the valid ones."""
    if not isinstance(body, dict):
        raise ValueError(f"{where or cls.__name__}: expected an object, got {type(body).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise ValueError(f"{where or cls.__name__}: unknown keys {unknown}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _value(hints[name], value, f"{where or cls.__name__}.{name}") for name, value in body.items()})


def _value(hint: Any, value: Any, where: str) -> Any:
    hint, _ = _unwrap(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_dict(hint, value, where)
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return tuple(_value(item, v, where) for v in value)
    return value


class Config:
    """Base of the typed configs: `from_dict` (unknown keys refused, nested configs and tuples rebuilt) and
    `to_dict` (plain values, tuples become lists when dumped as JSON), inverses of each other."""

    @classmethod
    def from_dict(cls, body: dict[str, Any], where: str = "") -> Any:
        return from_dict(cls, body, where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
