"""The FP32 reference outputs of a user's checkpoint and data, computed once and kept on disk.

An entry is keyed by the SHA-256 of what produced it: the checkpoint's files, the evaluation data (its provenance:
file hashes, preprocessing settings, sample count), and the code that turns them into outputs (the sources of
``models/`` and ``conformance/datasets/``). Any change to one of them is a different key, so a stale entry is never
read; entries are written atomically (a cancelled run leaves none half-written) and only after the outputs exist, so
nothing is cached from a failed preprocessing.

An entry holds, beside the outputs, what it was computed from (the model and the whole key) and the SHA-256 of the
outputs it holds; it is read bounded (a regular file, header first, no pickle) and used only when all of that matches.
A damaged entry (unreadable, truncated, another key's or model's, outputs that do not hash to what it says, not the
output names or row count asked for) is computed again and replaced, and the replacement says why.

Seeded weights are kept in the same directory (:class:`WeightCache`, ``<directory>/weights/``), keyed by what they
are a function of (the model, its config, the seed, the recipes' version: :func:`models.base.seeded_key`), so that
they are built once per machine; ``IPU_CONFORMANCE_WEIGHT_CACHE=0`` builds them in every run instead.

Calibrated FP8 input scales are kept there too (:class:`ScaleCache`, ``<directory>/fp8-scales/``), keyed by the model
with its weights (its fingerprint), the calibration settings and inputs, and the suite's sources: a calibration runs the
model in FP32 over its calibration set, about 9 s for roformer, once per machine instead of in every run.

The directory follows the platform's convention (``platformdirs.user_cache_dir``: ``~/.cache/ipu-conformance`` on
Linux) unless ``--cache-dir`` or ``IPU_CONFORMANCE_CACHE`` names another.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import platformdirs

from boundedio import load_json
from conformance.distributed.fingerprint import fingerprint, suite_version
from conformance.fileio import read_entry, sources_sha256, write_bytes_atomic, write_entry
from models.base import MEMORY_SHARE, available_memory, use_seeded_weight_store
from models.blas import host_arithmetic

CACHE_VARIABLE = "IPU_CONFORMANCE_CACHE"
WEIGHT_CACHE_VARIABLE = "IPU_CONFORMANCE_WEIGHT_CACHE"
_ON, _OFF = ("1", "on", "yes", "true"), ("0", "off", "no", "false")
_ROOT = Path(__file__).resolve().parents[2]
# Sources whose change changes the FP32 outputs of a given checkpoint and data set.
_CODE_DIRECTORIES = (_ROOT / "models", _ROOT / "conformance" / "datasets")
ENTRY_FORMAT = 3
WEIGHT_ENTRY_FORMAT = 1
SCALE_ENTRY_FORMAT = 1
SCALE_ENTRY_LIMIT = 4 << 20  # bytes: a model's scales are a few kilobytes (two per matrix op)


class CacheError(ValueError):
    """A cache directory that cannot be created or written."""


class DamagedEntry(ValueError):
    """A cache entry that cannot be used (it is computed again)."""


def default_directory() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured) if configured else Path(platformdirs.user_cache_dir("ipu-conformance"))


def weight_cache_enabled() -> bool:
    """Whether seeded weights are cached (``IPU_CONFORMANCE_WEIGHT_CACHE``: 1/on/yes/true, the default, or
    0/off/no/false); a ValueError for another value."""
    value = os.environ.get(WEIGHT_CACHE_VARIABLE, "").strip().lower()
    if not value or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"environment variable {WEIGHT_CACHE_VARIABLE}={value[:40]!r} is not a switch; expected 0 (build "
                     "seeded weights in every run) or 1 (cache them, the default)")


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
    return sources_sha256(_ROOT, _CODE_DIRECTORIES)


def entry_key(model: str, checkpoint: dict | None, data: dict, code: str | None = None) -> str:
    """The key of one entry: model name, checkpoint fingerprint, data fingerprint and code version."""
    document = {"model": model, "checkpoint": checkpoint, "data": data, "code": code or code_version()}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


class OutputCache:
    """FP32 outputs by key, as ``<directory>/fp32/<model>-<key>.npz`` (no pickle), each with what it was computed
    from and the hash of what it holds. ``replaced`` records the damaged entries computed again (path -> why)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.replaced: dict[str, str] = {}

    def path(self, model: str, key: str) -> Path:
        return self.directory / "fp32" / f"{model}-{key[:32]}.npz"

    def read(self, model: str, key: str, names=None, rows: int | None = None) -> dict[str, np.ndarray]:
        """The outputs stored under ``key``; a DamagedEntry saying why they cannot be used (not there, unreadable,
        computed from something else, not hashing to what the entry says, other output names or row count than
        ``names`` and ``rows``)."""
        path = self.path(model, key)
        if not os.path.lexists(path):
            raise DamagedEntry("no entry")
        budget = int(MEMORY_SHARE * available_memory())
        arrays, _ = read_entry(path, "a cache entry of FP32 outputs",
                               {"format": ENTRY_FORMAT, "model": model, "key": key}, max_bytes=budget, error=DamagedEntry)
        if names is not None and set(arrays) != set(names):
            raise DamagedEntry(f"{path}: outputs {sorted(arrays)}, expected {sorted(names)}")
        if rows is not None and any(np.ndim(v) == 0 or len(v) != rows for v in arrays.values()):
            raise DamagedEntry(f"{path}: not {rows} rows of outputs")
        return arrays

    def write(self, model: str, key: str, outputs: dict[str, np.ndarray]) -> Path:
        """Store ``outputs`` under ``key`` with what they were computed from and their hash (atomically)."""
        path = self.path(model, key)
        try:
            write_entry(path, outputs, {"format": ENTRY_FORMAT, "model": model, "key": key})
        except OSError as exc:
            raise CacheError(f"cache entry {str(path)!r} cannot be written ({exc.strerror or exc})") from None
        return path

    def get_or_compute(self, model: str, key: str, compute: Callable[[], dict[str, np.ndarray]], names=None,
                       rows: int | None = None) -> tuple[dict, bool]:
        """The cached outputs under ``key`` (True), or ``compute()``'s, stored (False). An entry that cannot be used
        (see :meth:`read`) is computed again and replaced, with a warning saying why."""
        try:
            return self.read(model, key, names, rows), True
        except DamagedEntry as exc:
            reason = str(exc)
        outputs = compute()
        if reason != "no entry":
            path = str(self.path(model, key))
            self.replaced[path] = reason
            warnings.warn(f"cache entry {path} could not be used ({reason}); computed again and replaced",
                          stacklevel=2)
        self.write(model, key, outputs)
        return outputs, False


class WeightCache:
    """Seeded weights by what they are a function of (the store :func:`models.base.use_seeded_weight_store` takes), as
    ``<directory>/weights/<model>-<key hash>.npz`` (no pickle), each with its whole key and the hash of its arrays.
    An entry that cannot be used (unreadable, truncated, another key's, arrays that do not hash to what it records) is
    never read: the weights are built again and the entry replaced, with a warning saying why (``replaced``: path ->
    why). An entry that cannot be written costs only the time to build the weights next run (a warning)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory) / "weights"
        self.replaced: dict[str, str] = {}

    def path(self, model: str, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.directory / f"{model}-{digest[:32]}.npz"

    def has(self, model: str, key: dict) -> bool:
        return self.path(model, key).is_file()

    def load(self, model: str, key: dict) -> dict[str, np.ndarray] | None:
        path = self.path(model, key)
        if not os.path.lexists(path):
            return None
        budget = int(MEMORY_SHARE * available_memory())
        try:
            arrays, _ = read_entry(path, "a cache entry of seeded weights",
                                   {"format": WEIGHT_ENTRY_FORMAT, "model": model, "key": key}, max_bytes=budget,
                                   error=DamagedEntry)
        except DamagedEntry as exc:
            self.replaced[str(path)] = str(exc)
            warnings.warn(f"cache entry {path} could not be used ({exc}); {model}'s seeded weights are built again "
                          "and the entry replaced", stacklevel=2)
            return None
        return arrays

    def save(self, model: str, key: dict, params: dict[str, np.ndarray]) -> None:
        path = self.path(model, key)
        try:
            write_entry(path, dict(params), {"format": WEIGHT_ENTRY_FORMAT, "model": model, "key": key})
        except OSError as exc:
            warnings.warn(f"{model}'s seeded weights could not be cached at {path} ({exc.strerror or exc}); they are "
                          "built again in the next run", stacklevel=2)


def weight_cache(directory: Path | None = None) -> WeightCache | None:
    """The cache of seeded weights under ``directory`` (default: :func:`default_directory`), or None when
    ``IPU_CONFORMANCE_WEIGHT_CACHE`` turns it off or the directory cannot be written (the weights are then built in
    every run, with a warning saying why)."""
    if not weight_cache_enabled():
        return None
    try:
        return WeightCache(check_writable(directory if directory is not None else default_directory()))
    except CacheError as exc:
        warnings.warn(f"{exc}; seeded weights are built in every run", stacklevel=2)
        return None


@contextlib.contextmanager
def cached_seeded_weights(directory: Path | None = None):
    """Within the block, :func:`models.load_model` keeps seeded weights in :func:`weight_cache` (``directory``)."""
    previous = use_seeded_weight_store(weight_cache(directory))
    try:
        yield
    finally:
        use_seeded_weight_store(previous)


class ScaleCache:
    """Calibrated FP8 input scales (a backend's ``scale_store``: the ipu backend's calibrations read and keep them), as
    ``<directory>/fp8-scales/<model>-<key hash>.json``, each with its whole key and the SHA-256 of its scales. An entry
    that cannot be used (unreadable, over its size bound, another key's, scales that do not hash to what it records or
    that calibration could not have made) is never read: the scales are calibrated again and the entry replaced, with a
    warning saying why (``replaced``: path -> why). One that cannot be written costs a calibration next run."""

    def __init__(self, directory: Path):
        self.directory = Path(directory) / "fp8-scales"
        self.replaced: dict[str, str] = {}
        self._fingerprints: dict[int, tuple[object, str]] = {}

    def key(self, model, what: dict) -> dict:
        """What the scales of ``model`` are a function of: ``what`` (settings, inputs), the model with its weights, the
        suite's sources and the host's arithmetic (:func:`models.blas.host_arithmetic`). The model's fingerprint is
        taken once per model object."""
        kept = self._fingerprints.get(id(model))
        if kept is None or kept[0] is not model:
            kept = self._fingerprints[id(model)] = (model, fingerprint(model))
        document = {"format": SCALE_ENTRY_FORMAT, "model": model.name, "weights": kept[1], "suite": suite_version(),
                    "host": host_arithmetic(), **what}
        return json.loads(json.dumps(document, sort_keys=True))  # as it reads back: tuples as lists

    def path(self, model, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.directory / f"{model.name}-{digest[:32]}.json"

    @staticmethod
    def _digest(scales) -> str:
        return hashlib.sha256(json.dumps(scales, sort_keys=True).encode()).hexdigest()

    def load(self, model, what: dict, check) -> dict | None:
        try:
            key = self.key(model, what)
        except TypeError:  # a model that holds what cannot be fingerprinted: calibrated in every run, as without a cache
            return None
        path = self.path(model, key)
        if not os.path.lexists(path):
            return None
        try:
            entry = load_json(path, "a cache entry of FP8 scales", SCALE_ENTRY_LIMIT, error=DamagedEntry)
            if not isinstance(entry, dict) or set(entry) != {"key", "scales", "sha256"}:
                raise DamagedEntry("not an entry of FP8 scales (expected key, scales and sha256)")
            if entry["key"] != key:
                raise DamagedEntry("it holds the scales of another model, weights, settings or calibration inputs")
            if entry["sha256"] != self._digest(entry["scales"]):
                raise DamagedEntry("its scales do not hash to the SHA-256 it records")
            try:
                return check(entry["scales"])
            except ValueError as exc:
                raise DamagedEntry(str(exc)) from None
        except DamagedEntry as exc:
            self.replaced[str(path)] = str(exc)
            warnings.warn(f"cache entry {path} could not be used ({exc}); {model.name}'s FP8 input scales are "
                          "calibrated again and the entry replaced", stacklevel=2)
            return None

    def save(self, model, what: dict, scales: dict) -> None:
        try:
            key = self.key(model, what)
        except TypeError:
            return
        path = self.path(model, key)
        entry = {"key": key, "scales": scales, "sha256": self._digest(scales)}
        try:
            write_bytes_atomic(path, json.dumps(entry, sort_keys=True).encode())
        except OSError as exc:
            warnings.warn(f"{model.name}'s FP8 input scales could not be cached at {path} ({exc.strerror or exc}); "
                          "they are calibrated again in the next run", stacklevel=2)


def scale_cache(directory: Path | None = None) -> ScaleCache | None:
    """The cache of FP8 input scales under ``directory`` (default: :func:`default_directory`), or None when the
    directory cannot be written (the scales are then calibrated in every run, with a warning saying why)."""
    try:
        return ScaleCache(check_writable(directory if directory is not None else default_directory()))
    except CacheError as exc:
        warnings.warn(f"{exc}; FP8 input scales are calibrated in every run", stacklevel=2)
        return None
