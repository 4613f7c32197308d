"""Fingerprints of what determines a batch's outputs: the suite's computing sources, and the objects a worker
computes with.

:func:`fingerprint` hashes an object by value, walking what it holds (dataclass fields, instance attributes, dicts,
lists, arrays by dtype, shape and bytes, functions by name and the values they close over), so that a model and its
prepared ops (weights, precision policy, FP8 scales) give the same digest in every process that builds them alike,
and a different one when any of that differs. An object met twice is hashed once (then by reference); types it cannot
see into are a TypeError naming where they were found.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import types
from pathlib import Path, PurePath

import numpy as np

from conformance.fileio import sources_sha256

_ROOT = Path(__file__).resolve().parents[2]
# The code that computes a batch's outputs (and its probe's extras) from the model, its prepared ops and the inputs,
# each of which a key holds by value, with the data files it reads: folders (with their subfolders) and single
# modules, relative to the project's root. What is not here cannot change those bits: the LoadGen runs and audits,
# the reports, the options and settings, the test drivers and the dataset readers (their arrays are keyed as inputs).
# A change there keeps the stored batches and the calibrated scales; tests/test_layering.py checks that nothing here
# imports it.
COMPUTE_FOLDERS = ("models", "boundedio", "conformance/numerics", "conformance/hardware", "conformance/graphs",
                   "conformance/engines", "conformance/distributed")
COMPUTE_FILES = ("conformance/__init__.py", "conformance/fileio.py", "conformance/datafiles.py",
                 "conformance/accuracy/__init__.py", "conformance/accuracy/evaluation.py",
                 "conformance/accuracy/diagnosis.py", "conformance/accuracy/metrics.py",
                 "conformance/accuracy/confidence.py", "conformance/datasets/__init__.py",
                 "conformance/datasets/base.py", "conformance/targets/__init__.py", "conformance/targets/accuracy.py",
                 "conformance/targets/accuracy.toml", "conformance/targets/bounds.py",
                 "conformance/targets/label_floors.py", "conformance/targets/label_floors.toml")
_SUITE_FILES = ("*.py", "*.toml")


@functools.lru_cache(maxsize=1)
def suite_version() -> str:
    """SHA-256 of the suite's computing sources and data files (:data:`COMPUTE_FOLDERS`, :data:`COMPUTE_FILES`): two
    processes that agree on it compute the same bits from the same inputs."""
    return compute_sources_sha256(_ROOT)


def compute_sources_sha256(root: Path) -> str:
    """:func:`suite_version` of the project at ``root``."""
    root = Path(root)
    h = hashlib.sha256()
    folders = [root / folder for folder in COMPUTE_FOLDERS]
    h.update(sources_sha256(root, folders, _SUITE_FILES, recursive=True).encode())
    for name in COMPUTE_FILES:
        path = root / name
        h.update(f"{name}|".encode())
        h.update(path.read_bytes() if path.is_file() else b"(absent)")
    return h.hexdigest()


_SCALARS = (type(None), bool, int, float, complex, str, bytes, PurePath)


def fingerprint(obj) -> str:
    """SHA-256 of ``obj`` by value (see the module's docstring)."""
    h = hashlib.sha256()
    _feed(h, obj, {}, "obj")
    return h.hexdigest()


def _feed(h, obj, seen: dict[int, int], where: str) -> None:
    if isinstance(obj, _SCALARS) or isinstance(obj, (type, types.ModuleType)):
        name = f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else \
            obj.__name__ if isinstance(obj, types.ModuleType) else repr(obj)
        h.update(f"{type(obj).__name__}:{name};".encode())
        return
    if isinstance(obj, np.generic):
        h.update(f"np:{obj.dtype.str}:{obj!r};".encode())
        return
    if id(obj) in seen:
        h.update(f"ref:{seen[id(obj)]};".encode())
        return
    seen[id(obj)] = len(seen)
    kind = type(obj)
    h.update(f"{kind.__module__}.{kind.__qualname__}(".encode())
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError(f"cannot fingerprint {where}: an array of Python objects")
        h.update(f"{obj.dtype.str}:{obj.shape};".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, enum.Enum):
        h.update(f"{obj.name};".encode())
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _feed(h, item, seen, f"{where}[{i}]")
    elif isinstance(obj, (set, frozenset)):
        for digest in sorted(fingerprint(item) for item in obj):
            h.update(digest.encode())
    elif isinstance(obj, dict):
        for key_digest, key, value in sorted((fingerprint(k), k, v) for k, v in obj.items()):
            h.update(key_digest.encode())
            _feed(h, value, seen, f"{where}[{key!r}]")
    elif isinstance(obj, types.MethodType):
        _feed(h, obj.__func__, seen, f"{where}.__func__")
        _feed(h, obj.__self__, seen, f"{where}.__self__")
    elif isinstance(obj, (types.FunctionType, functools.partial)):
        _feed_function(h, obj, seen, where)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            h.update(f"{f.name}=".encode())
            _feed(h, getattr(obj, f.name), seen, f"{where}.{f.name}")
    elif hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
        # what the object sends along when pickled, where its class says (caches of derived data left out)
        attributes = dict(_state(obj)) if hasattr(obj, "__dict__") else {}
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    attributes[slot] = getattr(obj, slot)
        for name in sorted(attributes):
            h.update(f"{name}=".encode())
            _feed(h, attributes[name], seen, f"{where}.{name}")
    else:
        raise TypeError(f"cannot fingerprint {where}: a {kind.__qualname__} holds nothing this can see")
    h.update(b")")


def _state(obj) -> dict:
    """``obj``'s attributes, or the dict its class's own ``__getstate__`` pickles instead (object's default aside)."""
    if getattr(type(obj), "__getstate__", None) not in (None, getattr(object, "__getstate__", None)):
        state = obj.__getstate__()
        if isinstance(state, dict):
            return state
    return vars(obj)


def _feed_function(h, fn, seen: dict[int, int], where: str) -> None:
    """A function by its module, qualified name and what it closes over (defaults, closure cells); a partial by its
    function and arguments."""
    if isinstance(fn, functools.partial):
        for part, value in (("func", fn.func), ("args", fn.args), ("keywords", fn.keywords)):
            _feed(h, value, seen, f"{where}.{part}")
        return
    h.update(f"{fn.__module__}.{fn.__qualname__};".encode())
    _feed(h, fn.__defaults__, seen, f"{where}.__defaults__")
    _feed(h, fn.__kwdefaults__, seen, f"{where}.__kwdefaults__")
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        h.update(f"{name}=".encode())
        _feed(h, cell.cell_contents, seen, f"{where}.<{name}>")
