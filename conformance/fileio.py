"""Files: atomic writes (a temporary file in the same directory, fsynced, then renamed over the target, so an
interrupted run leaves either the previous file or the new one, never a half-written one), the atomic exchange of two
directories, and TOML loading."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import tempfile
from pathlib import Path

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


def load_toml(path) -> dict:
    """The TOML document at ``path``; a ValueError naming the file when it is missing or not valid TOML."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return parse_toml(text, path)


def parse_toml(text: str, source) -> dict:
    """The TOML document ``text``; a ValueError naming ``source`` (its file) when it is not valid TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: not valid TOML: {exc}") from None
