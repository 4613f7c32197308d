"""Bounded readers of the files a run is given (TOML, JSON, UTF-8 text, lines): a special file (FIFO, device, socket)
is refused before it is opened, a file over its kind's size limit before it is read, a line longer than its format's
lines before it is held in memory, and a document is parsed strictly (JSON numbers finite and of sensible length, TOML's
integers within 64 bits). Every problem is an :class:`InputFileError` (or the caller's subclass of ValueError) naming
the file and, where there is one, the line. It needs the standard library alone (and tomli before Python 3.11), so that
the models (checkpoints) and the suite (data sets, data files, results) read through the same readers."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
TOML_LIMIT = 4 * MIB  # the suite's data files are a few KB each
JSON_CONFIG_LIMIT = 4 * MIB  # config.json, tokenizer_config.json, preprocessor_config.json, the reference manifest
MAX_NUMBER_CHARS = 40  # a JSON number longer than this is not a figure any of the suite's files holds
INT64 = (-(1 << 63), (1 << 63) - 1)  # TOML's integers (its specification: 64-bit, an error otherwise)


class InputFileError(ValueError):
    """A file that cannot be read as what it should be: missing, a special file, over its size limit, not UTF-8, not
    valid JSON or TOML, not an ``.npz`` of the expected arrays. The message names the file (and line where known)."""


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def size_text(nbytes: float) -> str:
    """``nbytes`` for a message: ``3.0 MiB``, ``512 bytes``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


MAX_DIGITS = 20  # a count written with more digits than this is not a count
_INTEGER = re.compile(r"[0-9]{1,%d}" % MAX_DIGITS, re.ASCII)
_SIGNED = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_DIGITS, re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?", re.ASCII)


def ascii_integer(text: str, low: int, high: int, signed: bool = False) -> int:
    """``text`` (blanks around it ignored) as an integer from ``low`` to ``high``, written in ASCII digits (with a sign
    when ``signed``), at most :data:`MAX_DIGITS` of them; a ValueError saying what was expected otherwise. Every count
    the suite is given, from an option, an environment variable or a file, is read here: Python's ``int()`` and
    ``str.isdigit()`` also take other scripts' digits (``٣``), ``_`` separators and, for isdigit, superscripts."""
    text = str(text).strip()
    if not (_SIGNED if signed else _INTEGER).fullmatch(text):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"expected an integer written in digits, got {shown!r} (the digits 0-9 only)")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"expected an integer from {low:,} to {high:,}, got {number:,}")
    return number


def ascii_decimal(text: str) -> float:
    """``text`` (blanks around it ignored) as a finite number written in ASCII (``-1.5``, ``2e-3``); a ValueError
    otherwise (``float()`` also takes other scripts' digits, ``_`` separators, ``nan`` and ``inf``)."""
    text = str(text).strip()
    if len(text) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(text) or not math.isfinite(float(text)):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"expected a finite number written in digits, got {shown!r} (the digits 0-9 only)")
    return float(text)


def regular_file(path, what: str, limit: int | None = None, error: type[ValueError] = InputFileError) -> int:
    """The size of ``path``, checked with ``os.stat`` before anything opens it: a regular file (a FIFO or device would
    block or never end) of at most ``limit`` bytes; otherwise ``error`` naming the file and ``what`` it should be."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file; expected {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc}); expected {what}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: {_file_kind(info.st_mode)}; expected {what} (a regular file)")
    if limit is not None and info.st_size > limit:
        raise error(f"{path}: {size_text(info.st_size)}, more than the {size_text(limit)} {what} may take")
    return info.st_size


def open_regular(path, what: str, limit: int | None = None, error: type[ValueError] = InputFileError) -> BinaryIO:
    """``path`` opened for binary reading after :func:`regular_file`; opened without blocking and checked again on the
    open descriptor, so a file swapped for a FIFO in between is refused too."""
    regular_file(path, what, limit, error)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc}); expected {what}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{path}: {_file_kind(info.st_mode)}; expected {what} (a regular file)")
    return os.fdopen(fd, "rb")


def read_bytes(path, what: str, limit: int, error: type[ValueError] = InputFileError) -> bytes:
    """The bytes of ``path`` (:func:`open_regular`), at most ``limit`` of them (a file that grew past it is refused)."""
    with open_regular(path, what, limit, error) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise error(f"{path}: more than the {size_text(limit)} {what} may take")
    return data


def decode_text(data: bytes, source, error: type[ValueError] = InputFileError, first_line: int = 1) -> str:
    """``data`` as UTF-8 (a leading byte-order mark dropped); ``error`` naming ``source``, the line and the byte."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise error(f"{source}:{line}: not UTF-8 text (byte {data[exc.start:exc.start + 1]!r} at offset "
                    f"{exc.start})") from None


def read_text(path, what: str, limit: int, error: type[ValueError] = InputFileError) -> str:
    """The UTF-8 text of ``path``, bounded as :func:`read_bytes`."""
    return decode_text(read_bytes(path, what, limit, error), path, error)


def iter_lines(handle: BinaryIO, source, max_line: int, error: type[ValueError] = InputFileError
               ) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line break) of a binary stream, reading one bounded line at a time: a line
    longer than ``max_line`` bytes is ``error`` naming ``source`` and the line, not a line held in memory."""
    number = 0
    while True:
        line = handle.readline(max_line + 2)
        if not line:
            return
        number += 1
        content = line.rstrip(b"\r\n")
        if len(content) > max_line:
            raise error(f"{source}:{number}: a line longer than {size_text(max_line)}; the lines of this format are "
                        "much shorter (is it the right file?)")
        yield number, content


class _BadNumber(ValueError):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def _json_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _BadNumber(text)
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if len(text) > MAX_NUMBER_CHARS or not math.isfinite(value):
        raise _BadNumber(text)
    return value


def _json_constant(name: str):
    raise _BadNumber(name)


def _line_of(text: str, needle: str) -> int | None:
    at = text.find(needle)
    return None if at < 0 else text.count("\n", 0, at) + 1


def parse_json(text: str, source, error: type[ValueError] = InputFileError, first_line: int = 1) -> Any:
    """The JSON document ``text``; ``error`` naming ``source`` and the line (``text`` starting at line ``first_line``
    of its file) for a syntax error, nesting deeper than Python's recursion allows, and numbers that are not finite or
    longer than :data:`MAX_NUMBER_CHARS` characters (``NaN``, ``Infinity``, ``1e999``, thousands of digits)."""
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except _BadNumber as exc:
        line = _line_of(text, exc.text)
        where = f"{source}:{first_line + line - 1}" if line else f"{source}"
        shown = exc.text if len(exc.text) <= 24 else f"{exc.text[:12]}...{exc.text[-6:]} ({len(exc.text)} characters)"
        raise error(f"{where}: the number {shown} is not a finite number of at most {MAX_NUMBER_CHARS} "
                    "characters") from None
    except json.JSONDecodeError as exc:
        raise error(f"{source}:{first_line + exc.lineno - 1}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise error(f"{source}{f':{first_line}' if first_line > 1 else ''}: nested too deeply to be read (arrays or "
                    "objects inside each other hundreds of levels deep)") from None


def load_json(path, what: str, limit: int = JSON_CONFIG_LIMIT, error: type[ValueError] = InputFileError) -> Any:
    """The JSON document at ``path``: :func:`read_text` then :func:`parse_json`."""
    return parse_json(read_text(path, what, limit, error), path, error)


def load_toml(path, limit: int = TOML_LIMIT) -> dict:
    """The TOML document at ``path``; a ValueError (InputFileError) naming the file when it is missing, a special file,
    over ``limit`` bytes, not UTF-8 (with the line) or not valid TOML."""
    return parse_toml(read_text(path, "a TOML file", limit), path)


def parse_toml(text: str, source) -> dict:
    """The TOML document ``text``; a ValueError naming ``source`` (its file) when it is not valid TOML: a syntax error,
    nesting too deep to read, or an integer outside TOML's 64-bit range."""
    try:
        document = tomllib.loads(text)
    except RecursionError:
        raise InputFileError(f"{source}: not valid TOML: nested too deeply to be read") from None
    except ValueError as exc:  # TOMLDecodeError, and int()'s limit on the digits of an integer
        raise InputFileError(f"{source}: not valid TOML: {exc}") from None
    return document


def out_of_range_numbers(document, path: tuple = ()) -> Iterator[tuple[tuple, object]]:
    """(key path, value) of every number of a parsed document that is not a finite float or an integer of TOML's
    64-bit range (``inf``, ``nan``, 10**30)."""
    if isinstance(document, dict):
        for key, value in document.items():
            yield from out_of_range_numbers(value, path + (key,))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from out_of_range_numbers(value, path + (index,))
    elif isinstance(document, bool):
        return
    elif isinstance(document, int) and not INT64[0] <= document <= INT64[1]:
        yield path, document
    elif isinstance(document, float) and not math.isfinite(document):
        yield path, document
