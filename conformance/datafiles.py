"""Data files validated when loaded: each TOML file of the suite has a pydantic schema (:class:`Schema`: unknown keys
refused, strict types, so that TOML's ``true`` is not the number 1, numbers finite), and :func:`load_validated` turns a
``ValidationError`` into one :class:`DataFileError` that names the file, the line, the dotted key and what was expected.

Before any schema sees it, :func:`read_toml` reads a file bounded (a regular file of at most
:data:`boundedio.TOML_LIMIT` bytes, UTF-8) and refuses numbers no figure of the suite's files can be: ``inf``
and ``nan``, integers beyond TOML's 64-bit range, and floats beyond :data:`FLOAT_MAGNITUDE` or nearer to zero than its
inverse (products and quotients of a few such figures overflow or divide by zero).
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path

from pydantic import BaseModel, ConfigDict, RootModel, ValidationError

from boundedio import TOML_LIMIT, InputFileError, out_of_range_numbers, parse_toml, read_text

MAX_LISTED = 8  # problems listed in one message; the rest are counted
FLOAT_MAGNITUDE = 1e15  # no float of the suite's data files is larger, or nearer to zero than 1 / FLOAT_MAGNITUDE


class DataFileError(ValueError):
    """A data file that is missing, not valid TOML, or not what its schema allows; the message names the file, the
    line (where it can be found) and the key."""


class Schema(BaseModel):
    """Base of the data files' schemas: unknown keys are errors, types are strict (no bool for a number, no float for
    an integer, no number for a string), a validated value is not changed afterwards."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def read_toml(path) -> tuple[dict, str]:
    """The TOML document at ``path`` and its text; a DataFileError naming the file (and line and key where there are
    some) when it cannot be read or parsed, or holds a number outside what the suite's figures can be."""
    path = Path(path)
    try:
        text = read_text(path, "a TOML data file", TOML_LIMIT, DataFileError)
        document = parse_toml(text, path)
    except InputFileError as exc:
        raise DataFileError(str(exc)) from None
    check_numbers(document, path, text)
    return document, text


def check_numbers(document, path, text: str | None = None) -> None:
    """A DataFileError naming each number of ``document`` that is not finite, beyond TOML's 64-bit integers, or a float
    beyond :data:`FLOAT_MAGNITUDE` (or nearer to zero than its inverse)."""
    lines = key_lines(text) if text is not None else {}
    problems = [(_line(loc, lines), f"{dotted(loc)} = {_show(value)}", "not a finite number" if isinstance(value, float)
                 else "outside TOML's 64-bit integers") for loc, value in out_of_range_numbers(document)]
    problems += [(_line(loc, lines), f"{dotted(loc)} = {_show(value)}",
                  f"a figure beyond {FLOAT_MAGNITUDE:g} (or nearer to zero than {1 / FLOAT_MAGNITUDE:g}) means nothing "
                  "in the suite's data") for loc, value in _floats(document)
                 if math.isfinite(value) and value != 0 and not 1 / FLOAT_MAGNITUDE <= abs(value) <= FLOAT_MAGNITUDE]
    if problems:
        raise DataFileError(format_problems(path, problems))


def _floats(document, path: tuple = ()):
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _floats(value, path + (key,))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _floats(value, path + (index,))
    elif isinstance(document, float):
        yield path, document


def load_validated(path, schema: type[BaseModel], *, context: dict | None = None):
    """Read ``path`` and validate it against ``schema``: the validated model, or a DataFileError listing every problem."""
    data, text = read_toml(path)
    return validate(data, schema, path, text, context=context)


def validate(data, schema: type[BaseModel], path, text: str | None = None, *, context: dict | None = None):
    """``schema.model_validate(data)``; a DataFileError naming ``path`` and, with ``text``, each problem's line."""
    try:
        return schema.model_validate(data, context=context)
    except ValidationError as exc:
        lines = key_lines(text) if text is not None else {}
        problems = [_describe(error, schema, lines) for error in exc.errors(include_url=False)]
        raise DataFileError(format_problems(path, problems)) from None


def fail(path, loc: tuple, message: str, text: str | None = None) -> typing.NoReturn:
    """Raise a DataFileError for one problem at key path ``loc`` (a check the schema cannot express)."""
    lines = key_lines(text) if text is not None else {}
    raise DataFileError(format_problems(path, [(_line(loc, lines), dotted(loc), message)]))


def format_problems(path, problems: list[tuple[int | None, str, str]]) -> str:
    """``problems`` as (line, key, message) in one message: a single problem on one line, several one per line."""
    def one(line, key, message):
        where = f"{path}:{line}" if line else f"{path}"
        return f"{where}: {key}: {message}" if key else f"{where}: {message}"

    if len(problems) == 1:
        return one(*problems[0])
    listed = [f"  {f'line {line}: ' if line else ''}{f'{key}: ' if key else ''}{message}"
              for line, key, message in problems[:MAX_LISTED]]
    more = len(problems) - MAX_LISTED
    tail = [f"  ... and {more} more"] if more > 0 else []
    return "\n".join([f"{path}: {len(problems)} problems", *listed, *tail])


def dotted(loc) -> str:
    """``("targets", "resnet50", "ipu")`` -> ``targets.resnet50.ipu``; a list index as ``[i]`` (``row[3]``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            part = str(part)
            key = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else '"' + part.replace('"', '\\"') + '"'
            out += f".{key}" if out else key
    return out


# -- messages ------------------------------------------------------------------------------------------------------
def _describe(error: dict, schema: type[BaseModel], lines: dict) -> tuple[int | None, str, str]:
    loc = tuple(error["loc"])
    kind = error["type"]
    is_key = "[key]" in loc
    if is_key:  # a bad dictionary key: pydantic's loc is (..., key, "[key]")
        loc = loc[:loc.index("[key]")]
    loc = tuple(p for p in loc if not _is_union_tag(p))
    message = error["msg"]
    message = message[0].lower() + message[1:] if message else message
    value = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(schema, loc[:-1])
        text = f"unknown key {loc[-1]!r}"
        return _line(loc, lines), dotted(loc[:-1]), text + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return _line(loc[:-1], lines), dotted(loc[:-1]), f"lacks the required key {loc[-1]!r}"
    if is_key:
        return _line(loc, lines), dotted(loc[:-1]), f"unknown name {loc[-1]!r}: {message}"
    message = message.removeprefix("value error, ")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "expected a table"
    shown = _show(value)
    return _line(loc, lines), dotted(loc) + (f" = {shown}" if shown is not None else ""), message


def _show(value) -> str | None:
    """The offending value as TOML writes it (``true``, ``-5``, ``"abc"``); None for tables and long lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"' if len(value) <= 60 else '"' + value[:57] + '..."'
    if isinstance(value, list) and len(repr(value)) <= 60:
        return repr(value)
    return None


def _is_union_tag(part) -> bool:
    """pydantic puts the member type of a union in the loc (``int``, ``list[str]``, ``function-after[...]``)."""
    return isinstance(part, str) and (part in ("int", "float", "str", "bool") or "[" in part)


def _allowed_keys(schema, loc: tuple) -> list[str]:
    """The keys the schema allows in the table at ``loc`` (for an unknown-key message); [] when not a model."""
    node = schema
    for part in loc:
        node = _step(node, part)
        if node is None:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel) and not issubclass(node, RootModel):
        return [field.alias or name for name, field in node.model_fields.items()]
    return []


def _unwrap(node):
    while True:
        origin = typing.get_origin(node)
        if origin is typing.Annotated:
            node = typing.get_args(node)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(node) if a is not type(None)]
            node = members[0] if len(members) == 1 else node
            if len(members) != 1:
                return node
        else:
            return node


def _step(node, part):
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, RootModel):  # a file whose top-level keys are names
        node = _unwrap(node.model_fields["root"].annotation)
    if isinstance(node, type) and issubclass(node, BaseModel):
        for name, field in node.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin, args = typing.get_origin(node), typing.get_args(node)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, tuple) and args:
        return args[0]
    return None


# -- lines ---------------------------------------------------------------------------------------------------------
_KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")


def _split(dotted_key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(rf"{_KEY}", dotted_key))


def key_lines(text: str) -> dict[tuple, int]:
    """Line number of each table header and key assignment of a TOML text, by key path (array-of-tables entries by
    index: ``("row", 3, "batch")``); inline tables are found at the line of their key. Multi-line strings are skipped."""
    lines: dict[tuple, int] = {}
    table: tuple = ()
    arrays: dict[tuple, int] = {}
    in_string = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        header = _HEADER.match(line)
        if header:
            path = _split(header.group(2))
            if header.group(1) == "[[":
                arrays[path] = arrays.get(path, -1) + 1
                table = path + (arrays[path],)
            else:
                # a header below an array of tables' entry belongs to its latest entry
                for length in range(len(path), 0, -1):
                    if path[:length] in arrays:
                        path = path[:length] + (arrays[path[:length]],) + path[length:]
                        break
                table = path
            lines.setdefault(table, number)
            continue
        assign = _ASSIGN.match(line)
        if assign:
            lines.setdefault(table + _split(assign.group(1)), number)
            rest = line[assign.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) % 2 == 1:
                    in_string = quote
    return lines


def _line(loc: tuple, lines: dict) -> int | None:
    """The line of ``loc`` or of the nearest enclosing key or table that the text names."""
    for length in range(len(loc), 0, -1):
        found = lines.get(tuple(loc[:length]))
        if found is not None:
            return found
    return None
