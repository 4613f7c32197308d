"""Per-batch outputs on disk, so that a run that was interrupted (Ctrl-C, a lost worker or node) resumes where it
stopped and recomputes nothing it has.

An entry is keyed by the SHA-256 of what determines its outputs: the job's identity (the fingerprint of the model with
its weights and of the prepared ops: backend, precision, policy, FP8 scales), the SHA-256 of the batch's inputs, the
batch's options (the probe), the suite's version (its sources) and the host's arithmetic (its BLAS kernels and
numpy's SIMD loops: a cache directory shared with another kind of CPU never gives this one its bits). It is written
atomically once the batch is computed, read bounded and used only when its record and its arrays' hash match
(:func:`conformance.fileio.read_entry`); a damaged entry is computed again and replaced, with a warning that says why.

Layout: ``<directory>/batches/<job name>/<key[:2]>/<key>.npz``, inside the suite's cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np

from conformance.distributed.fingerprint import suite_version
from conformance.fileio import read_entry, sha256_arrays, write_entry
from models.base import MEMORY_SHARE, available_memory
from models.blas import host_arithmetic

FORMAT = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class StoreError(ValueError):
    """A batch store directory that cannot be written."""


class _Damaged(ValueError):
    pass


class BatchStore:
    """Batches' outputs and extras (a JSON object: what the batch reports beside its outputs) by key.
    ``replaced``: the damaged entries computed again (path -> why)."""

    def __init__(self, directory):
        self.directory = Path(directory) / "batches"
        self.replaced: dict[str, str] = {}

    @staticmethod
    def key(identity: str, inputs: dict[str, np.ndarray], options: dict) -> str:
        document = {"format": FORMAT, "identity": identity, "inputs": sha256_arrays(inputs), "options": options,
                    "suite": suite_version(), "host": host_arithmetic()}
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()

    def path(self, name: str, key: str) -> Path:
        if not _NAME.match(name):
            raise ValueError(f"job name {name!r}: expected letters, digits, '_', '.', '-' (it names a folder)")
        return self.directory / name / key[:2] / f"{key}.npz"

    def read(self, name: str, key: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The stored (outputs, extras) of ``key``; None when there is none or it cannot be used (then it is noted
        in ``replaced`` and a warning says why; the caller computes it again)."""
        path = self.path(name, key)
        if not os.path.lexists(path):
            return None
        try:
            arrays, record = read_entry(path, "a stored batch", {"format": FORMAT, "name": name, "key": key},
                                        max_bytes=int(MEMORY_SHARE * available_memory()), error=_Damaged)
            if not isinstance(record.get("extras"), dict):
                raise _Damaged(f"{path}: its record holds no extras object")
        except _Damaged as exc:
            self.replaced[str(path)] = str(exc)
            warnings.warn(f"stored batch {path} could not be used ({exc}); computed again and replaced", stacklevel=2)
            return None
        return arrays, record["extras"]

    def write(self, name: str, key: str, outputs: dict[str, np.ndarray], extras: dict) -> Path:
        path = self.path(name, key)
        try:
            write_entry(path, outputs, {"format": FORMAT, "name": name, "key": key, "extras": extras})
        except OSError as exc:
            raise StoreError(f"stored batch {str(path)!r} cannot be written ({exc.strerror or exc}); give a writable "
                             "cache directory with --cache-dir DIR") from None
        return path
