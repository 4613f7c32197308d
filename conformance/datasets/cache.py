"""The FP32 reference outputs of a user's checkpoint and data, computed once and kept on disk.

An entry is keyed by the SHA-256 of what produced it: the checkpoint's files, the evaluation data (its provenance:
file hashes, preprocessing settings, sample count), and the code that turns them into outputs (the sources of
``models/`` and ``conformance/datasets/``). Any change to one of them is a different key, so a stale entry is never
read; entries are written atomically (a cancelled run leaves none half-written) and only after the outputs exist, so
nothing is cached from a failed preprocessing.

The directory follows the platform's convention (``platformdirs.user_cache_dir``: ``~/.cache/ipu-conformance`` on
Linux) unless ``--cache-dir`` or ``IPU_CONFORMANCE_CACHE`` names another.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import platformdirs

from conformance.fileio import write_bytes_atomic

CACHE_VARIABLE = "IPU_CONFORMANCE_CACHE"
_ROOT = Path(__file__).resolve().parents[2]
# Sources whose change changes the FP32 outputs of a given checkpoint and data set.
_CODE_DIRECTORIES = (_ROOT / "models", _ROOT / "conformance" / "datasets")


class CacheError(ValueError):
    """A cache directory that cannot be created or written."""


def default_directory() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("ipu-conformance"))


def check_writable(directory: Path) -> Path:
    """``directory`` created if needed and writable (a CacheError naming it otherwise)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CacheError(f"cache directory {str(directory)!r} is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(directory / ".write-test", b"")
        (directory / ".write-test").unlink()
    except OSError as exc:
        raise CacheError(f"cache directory {str(directory)!r} is not writable ({exc.strerror or exc}); "
                         f"give a writable one with --cache-dir DIR") from None
    return directory


def code_version() -> str:
    """SHA-256 over the sources that compute FP32 outputs from a checkpoint and a data set."""
    h = hashlib.sha256()
    for directory in _CODE_DIRECTORIES:
        for path in sorted(directory.glob("*.py")):
            h.update(f"{path.relative_to(_ROOT)}|".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def entry_key(model: str, checkpoint: dict | None, data: dict, code: str | None = None) -> str:
    """The key of one entry: model name, checkpoint fingerprint, data fingerprint and code version."""
    document = {"model": model, "checkpoint": checkpoint, "data": data, "code": code or code_version()}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


class OutputCache:
    """FP32 outputs by key, as ``<directory>/fp32/<model>-<key>.npz`` (no pickle)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def path(self, model: str, key: str) -> Path:
        return self.directory / "fp32" / f"{model}-{key[:32]}.npz"

    def get_or_compute(self, model: str, key: str, compute: Callable[[], dict[str, np.ndarray]]) -> tuple[dict, bool]:
        """The cached outputs under ``key`` (True), or ``compute()``'s, stored (False). An unreadable entry is
        computed again and replaced."""
        path = self.path(model, key)
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as data:
                    return {k: data[k] for k in data.files}, True
            except (OSError, ValueError):
                pass
        outputs = compute()
        buffer = io.BytesIO()
        np.savez(buffer, **outputs)
        write_bytes_atomic(path, buffer.getvalue())
        return outputs, False
