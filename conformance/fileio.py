"""Files: atomic writes (a temporary file in the same directory, fsynced, then renamed over the target, so an
interrupted run leaves either the previous file or the new one, never a half-written one), the atomic exchange of two
directories, and ``.npz`` archives read bounded and without pickle (the other kinds of file are read by
:mod:`boundedio`, on which these readers build): an archive's arrays are decompressed only as far as the caller asked
for, and every problem is an :class:`~boundedio.InputFileError` (or the caller's subclass of ValueError) naming the file
and the array."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import json
import math
import os
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from boundedio import InputFileError, decode_text, open_regular, parse_json, size_text


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
        raise error(f"{where}: {take} {dtype} is {size_text(nbytes)}, more than the {size_text(max(budget, 0))} this "
                    "file may take here")
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
