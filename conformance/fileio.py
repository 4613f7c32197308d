"""Files: atomic writes (a temporary file in the same directory, fsynced, then renamed over the target, so an
interrupted run leaves either the previous file or the new one, never a half-written one), the atomic exchange of two
directories, and the readers of every kind of file the suite is given (TOML, JSON, text, lines, ``.npz``), each
bounded: a special file (FIFO, device, socket) is refused before it is opened, a file over its kind's size limit is
refused before it is read, and a file is never decoded or decompressed beyond what the caller asked for. Every problem
is an :class:`InputFileError` (or the caller's subclass of ValueError) naming the file and, where there is one, the
line."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import json
import math
import os
import stat
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_bytes_atomic(path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform != "win32" else None
_RENAMEAT2 = getattr(_LIBC, "renameat2", None)  # Linux (glibc 2.28+)
_RENAMEX_NP = getattr(_LIBC, "renamex_np", None)  # macOS
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # Linux renameat2 flag
_RENAME_SWAP = 2  # macOS renamex_np flag


def exchange_paths(a, b) -> None:
    """Swap the two existing paths ``a`` and ``b`` (directories or files) in one step: at every moment each name holds
    either its old or its new content. An OSError when the system or the file system cannot (ENOSYS, EINVAL, ENOTSUP),
    or when a path is missing, busy (a mount point) or not writable."""
    source, target = os.fsencode(os.fspath(a)), os.fsencode(os.fspath(b))
    if _RENAMEAT2 is not None:
        status = _RENAMEAT2(_AT_FDCWD, source, _AT_FDCWD, target, _RENAME_EXCHANGE)
    elif _RENAMEX_NP is not None:
        status = _RENAMEX_NP(source, target, _RENAME_SWAP)
    else:
        raise OSError(errno.ENOSYS, "this system cannot exchange two paths atomically", os.fspath(a), None, os.fspath(b))
    if status != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fspath(a), None, os.fspath(b))


# -- bounded readers -------------------------------------------------------------------------------------------------
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


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


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
        raise error(f"{path}: {_size(info.st_size)}, more than the {_size(limit)} {what} may take")
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
        raise error(f"{path}: more than the {_size(limit)} {what} may take")
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
            raise error(f"{source}:{number}: a line longer than {_size(max_line)}; the lines of this format are "
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


# -- .npz archives ----------------------------------------------------------------------------------------------------
def sha256_arrays(arrays: dict[str, np.ndarray]) -> str:
    """Hash of the named arrays: names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        arr = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def json_array(document) -> np.ndarray:
    """A JSON document as a uint8 array, to store beside the arrays of an ``.npz`` (no pickle needed to read it)."""
    return np.frombuffer(json.dumps(document, sort_keys=True).encode(), np.uint8)


def array_json(array: np.ndarray, source, error: type[ValueError] = InputFileError) -> Any:
    """The JSON document :func:`json_array` stored (``error`` naming ``source`` when it is not one)."""
    if array.dtype != np.uint8 or array.ndim != 1:
        raise error(f"{source}: holds {array.dtype} {array.shape}, expected the uint8 bytes of a JSON document")
    return parse_json(decode_text(array.tobytes(), source, error), source, error)


def read_npz(path, what: str, names=None, *, rows: int | None = None, max_bytes: int,
             file_limit: int | None = None, error: type[ValueError] = InputFileError,
             required: bool = True, inspect=None) -> dict[str, np.ndarray]:
    """The arrays ``names`` (all of them when None) of an ``.npz`` archive, never unpickled, read member by member:
    each ``.npy`` header (dtype, shape) is read first, an object dtype is refused, ``inspect(name, shape, dtype)`` (if
    given) may refuse it, and only the first ``rows`` rows (all when None) are decompressed, ``max_bytes`` at most in
    all, so that a small archive that expands to gigabytes costs nothing. A missing array (with ``required``), a
    damaged archive (not a zip, a truncated member, a bad header) is ``error`` naming the file and the array."""
    try:
        with open_regular(path, what, file_limit, error) as handle:
            if handle.read(6) == b"\x93NUMPY":
                raise error(f"{path}: a single .npy array; expected {what}")
            handle.seek(0)
            return _read_members(handle, path, what, names, rows, max_bytes, error, required, inspect)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            OSError) as exc:
        raise error(f"{path}: not a readable .npz archive ({exc}); expected {what}") from None


def _read_members(handle, path, what, names, rows, max_bytes, error, required, inspect) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(handle) as archive:
        members = {name[:-4]: name for name in archive.namelist() if name.endswith(".npy")}
        if names is None:
            names = sorted(members)
        missing = [name for name in names if name not in members]
        if missing and required:
            raise error(f"{path}: no array(s) {missing}; it holds {sorted(members)}; expected {what}")
        arrays: dict[str, np.ndarray] = {}
        budget = max_bytes
        for name in names:
            if name not in members:
                continue
            with archive.open(members[name]) as member:
                arrays[name] = _read_npy(member, path, name, rows, budget, error, inspect)
            budget -= arrays[name].nbytes
        return arrays


def _read_npy(member, path, name: str, rows: int | None, budget: int, error, inspect=None) -> np.ndarray:
    where = f"{path}: array {name!r}"
    try:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise error(f"{where}: .npy format version {version} is not supported (1.0 or 2.0)")
    except (ValueError, EOFError, SyntaxError) as exc:
        if isinstance(exc, error):
            raise
        raise error(f"{where}: not a readable .npy header ({exc})") from None
    if dtype.hasobject:
        raise error(f"{where} cannot be read without pickle (it holds Python objects, dtype {dtype}, which are never "
                    "unpickled); expected a numeric array")
    if any(n < 0 for n in shape):
        raise error(f"{where}: shape {shape} is not an array shape")
    if inspect is not None:
        inspect(name, tuple(shape), dtype)
    take = shape
    if shape and rows is not None and not fortran:
        take = (min(rows, shape[0]),) + tuple(shape[1:])
    count = math.prod(take)
    nbytes = count * dtype.itemsize
    if nbytes > budget:
        raise error(f"{where}: {take} {dtype} is {_size(nbytes)}, more than the {_size(max(budget, 0))} this file "
                    "may take here")
    data = member.read(nbytes)
    if len(data) < nbytes:
        raise error(f"{where}: truncated ({len(data)} of {nbytes} bytes)")
    array = np.frombuffer(data, dtype=dtype, count=count).reshape(take, order="F" if fortran else "C").copy()
    if fortran and shape and rows is not None:
        array = np.ascontiguousarray(array[:rows])
    return array


# -- entries: arrays that carry what they were computed from ------------------------------------------------------
ENTRY = "__entry__"  # the array of an entry's .npz that holds its record (what it was computed from), as JSON


def write_entry(path, arrays: dict[str, np.ndarray], record: dict) -> None:
    """``arrays`` as an ``.npz`` (no pickle) with ``record`` (a JSON object) beside them, to which the SHA-256 of the
    arrays (``arrays_sha256``) and their shapes and dtypes are added; written atomically (an OSError if it cannot)."""
    record = {**record, "arrays_sha256": sha256_arrays(arrays),
              "arrays": {k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)} for k, v in arrays.items()}}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{ENTRY: json_array(record)})
    write_bytes_atomic(path, buffer.getvalue())


def read_entry(path, what: str, expected: dict, *, max_bytes: int, error: type[ValueError] = InputFileError
               ) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, record) of an entry :func:`write_entry` wrote, read bounded (:func:`read_npz`, ``max_bytes`` at most)
    and checked by content: its record holds every field of ``expected`` with that value, and its arrays hash to the
    SHA-256 it records; ``error`` naming the file and what differs otherwise."""
    arrays = read_npz(path, what, None, max_bytes=max_bytes, error=error)
    if ENTRY not in arrays:
        raise error(f"{path}: no {ENTRY!r} record of what it was computed from")
    record = array_json(arrays.pop(ENTRY), f"{path}: {ENTRY}", error)
    if not isinstance(record, dict):
        raise error(f"{path}: {ENTRY} is not a JSON object")
    for field, wanted in expected.items():
        if record.get(field) != wanted:
            raise error(f"{path}: computed for {field} {str(record.get(field))[:70]!r}, not {str(wanted)[:70]!r}")
    if sha256_arrays(arrays) != record.get("arrays_sha256"):
        raise error(f"{path}: its arrays do not hash to the SHA-256 it records")
    return arrays, record


def sources_sha256(root, directories, patterns=("*.py",), recursive: bool = False) -> str:
    """SHA-256 over the files matching ``patterns`` in ``directories`` (paths relative to ``root`` and contents, in
    path order; with ``recursive`` also their subfolders, ``__pycache__`` left out): a version of those sources."""
    root = Path(root)
    h = hashlib.sha256()
    for directory in directories:
        found = set()
        for pattern in patterns:
            found.update((Path(directory).rglob if recursive else Path(directory).glob)(pattern))
        for path in sorted(p for p in found if p.is_file() and "__pycache__" not in p.parts):
            h.update(f"{path.relative_to(root)}|".encode())
            h.update(path.read_bytes())
    return h.hexdigest()
