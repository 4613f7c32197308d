"""What the six models share: the Model protocol, input validation, seeded weights and checkpoint loading.

A model is built from a config dataclass and a dict of FP32 parameters named as in the transformers checkpoint of the same
architecture. ``model(inputs, ops)`` validates the inputs against :attr:`Model.input_specs` and runs :meth:`Model.forward`
through ``ops`` (the FP32 reference when none is given). Parameters are numpy arrays; the forward pass computes in the
library of its inputs (numpy, or another array API library's tensors through the FP32 ops: :meth:`Model.params_like`
moves the parameters there).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from safetensors import SafetensorError, safe_open

from boundedio import GIB, INT64, JSON_CONFIG_LIMIT, ascii_decimal, ascii_integer, load_json, parse_json, regular_file
from models import arrays
from models.blas import host_arithmetic
from models.ops import FP32, Ops


class CheckpointError(ValueError):
    """A checkpoint directory that is missing, incomplete, corrupted, or does not fit the architecture."""


class InputError(ValueError):
    """Model inputs with a missing name, a wrong shape or a wrong dtype."""


@dataclass(frozen=True)
class InputSpec:
    """One named input: its per-sample shape (the batch axis is not included) and its dtype kind."""

    name: str
    shape: tuple[int, ...]
    kind: str  # "int", "float" or "bool"
    dtype: str  # the dtype sample_inputs produces

    def describe(self) -> str:
        return f"{self.name}: {self.kind} array of shape (batch, {', '.join(map(str, self.shape))})".replace(", )", ")")


_KIND_CHECK = {
    "int": lambda xp, dt: np.issubdtype(dt, np.integer),
    "float": lambda xp, dt: np.issubdtype(dt, np.floating),
    "bool": lambda xp, dt: dt == np.bool_ or np.issubdtype(dt, np.integer),
}
# The same for the dtypes of another array API library.
_KIND_CHECK_STANDARD = {
    "int": lambda xp, dt: xp.isdtype(dt, "integral"),
    "float": lambda xp, dt: xp.isdtype(dt, "real floating"),
    "bool": lambda xp, dt: xp.isdtype(dt, ("bool", "integral")),
}


def _array_namespace(x):
    """The array API namespace of ``x`` when it is an array of a library array-api-compat knows (and it is
    installed); None otherwise."""
    try:
        namespace = arrays.namespace(x)
    except (ImportError, TypeError):
        return None
    return None if namespace is np else namespace


class Model:
    """Base class of the six models. Subclasses set ``name``, ``output_names`` and implement the abstract methods."""

    name: ClassVar[str] = ""
    output_names: ClassVar[tuple[str, ...]] = ()
    # the seed of seeded weights (:func:`models.load_model` sets it); None for a checkpoint's weights
    weight_seed: int | None = None

    def __init__(self, config, params: dict[str, np.ndarray]):
        self.config = config
        self.params = params
        # dtype name -> number of tensors, as stored in the checkpoint the parameters came from ({} for seeded weights)
        self.checkpoint_dtypes: dict[str, int] = dict(getattr(params, "checkpoint_dtypes", {}))
        # tensors of the checkpoint the model does not read: accepted with allow_unused (listed in the report), and
        # buffers known not to change what it computes (name -> why)
        self.unused_tensors: list[str] = list(getattr(params, "unused", []))
        self.ignored_tensors: dict[str, str] = dict(getattr(params, "ignored", {}))

    # -- to implement --------------------------------------------------------------------------------------------
    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        raise NotImplementedError

    def forward(self, inputs: dict[str, np.ndarray], ops: Ops) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def sample_inputs(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic inputs that look like the real data set's, for ``batch_size`` samples."""
        raise NotImplementedError

    def sample_labels(self, batch_size: int, seed: int = 0) -> np.ndarray | None:
        """The labels of :meth:`sample_inputs` (the same arguments, the same samples) where the samples have them:
        a synthetic task that seeded weights were built to solve. None by default, and for a checkpoint's weights."""
        return None

    # -- shared ----------------------------------------------------------------------------------------------------
    def __call__(self, inputs: dict[str, np.ndarray], ops: Ops | None = None) -> dict[str, np.ndarray]:
        """The outputs on ``inputs``: numpy arrays for numpy inputs; arrays of the inputs' library on their device for
        those of another array API library (torch tensors), through the FP32 ops (a hardware's ops take numpy's)."""
        self.validate_inputs(inputs)
        return self.forward(inputs, FP32 if ops is None else ops)

    def params_like(self, x) -> Mapping[str, np.ndarray]:
        """The parameters as arrays of the library and device of ``x`` (an input or activation) for the forward pass
        to compute with: :attr:`params` itself on numpy; for another array API library a mapping over them that moves
        each to that device on first use and keeps it, one per library and device (:class:`models.arrays.ParamsOn`:
        a parameter replaced in :attr:`params` is moved again, one changed in place is not)."""
        key = arrays.library_key(x)
        if key is None:
            return self.params
        moved = self.__dict__.setdefault("_params_on", {})
        if key not in moved or moved[key][0] is not self.params:
            moved[key] = (self.params, arrays.ParamsOn(self.params, x))
        return moved[key][1]

    # Attributes that hold data derived from what defines the model (caches made as it computes): left out of what
    # it pickles, so that a worker it is sent to, and its fingerprint, get what defines it whatever it computed before.
    derived: ClassVar[tuple[str, ...]] = ("_params_on",)

    def __getstate__(self) -> dict:
        """The model without its :attr:`derived` caches (its parameters' copies on other devices: a worker moves the
        parameters to its own device)."""
        return {k: v for k, v in self.__dict__.items() if k not in self.derived}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"

    @property
    def half_precision_checkpoint(self) -> bool:
        """Whether any parameter came from a float16 or bfloat16 checkpoint tensor (widened to float32 on loading)."""
        return any(dtype in HALF_PRECISION_DTYPES for dtype in self.checkpoint_dtypes)

    @property
    def num_parameters(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def validate_inputs(self, inputs: dict[str, np.ndarray]) -> int:
        """Check names, dtypes and shapes; return the batch size. Raises InputError naming the offending input."""
        specs = self.input_specs
        if not isinstance(inputs, dict):
            raise InputError(f"{self.name}: inputs must be a dict of arrays named {[s.name for s in specs]}, got {type(inputs).__name__}")
        missing = [s.name for s in specs if s.name not in inputs]
        if missing:
            expected = "; ".join(s.describe() for s in specs)
            raise InputError(f"{self.name}: missing input(s) {missing}; expected {expected}")
        batch = None
        for spec in specs:
            arr = inputs[spec.name]
            xp = np if isinstance(arr, np.ndarray) else _array_namespace(arr)
            if xp is None:
                raise InputError(f"{self.name}: input {spec.name!r} must be a numpy array, got {type(arr).__name__}")
            if not (_KIND_CHECK if xp is np else _KIND_CHECK_STANDARD)[spec.kind](xp, arr.dtype):
                raise InputError(f"{self.name}: input {spec.name!r} has dtype {arr.dtype}, expected {spec.kind} ({spec.describe()})")
            if arr.ndim != len(spec.shape) + 1 or tuple(arr.shape[1:]) != tuple(spec.shape):
                raise InputError(f"{self.name}: input {spec.name!r} has shape {tuple(arr.shape)}, expected {spec.describe()}")
            if spec.kind == "float" and not bool(xp.all(xp.isfinite(arr))):
                raise InputError(f"{self.name}: input {spec.name!r} contains NaN or Inf")
            if batch is None:
                batch = arr.shape[0]
            elif arr.shape[0] != batch:
                raise InputError(f"{self.name}: input {spec.name!r} has batch {arr.shape[0]}, other inputs have {batch}")
        return int(batch)


def run_batched(model: Model, inputs: dict[str, np.ndarray], batch_size: int, ops: Ops | None = None,
                progress=None) -> dict[str, np.ndarray]:
    """Run ``model`` over ``inputs`` in batches of ``batch_size`` and concatenate the outputs."""
    n = len(next(iter(inputs.values())))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, n, batch_size):
        batch = {k: v[start:start + batch_size] for k, v in inputs.items()}
        for key, value in model(batch, ops).items():
            parts.setdefault(key, []).append(value)
        if progress is not None:
            progress(min(start + batch_size, n), n)
    return {k: arrays.namespace(*v).concat(v) for k, v in parts.items()}


# -- configs ----------------------------------------------------------------------------------------------------------
def check_fields(config, ranges: dict[str, tuple], lengths: dict[str, tuple[int, int]] | None = None) -> None:
    """Check, and normalise in place, the fields of the (frozen) config dataclass ``config`` against their annotated
    types: an int field holds an int (never a bool, never a float such as 10.9, which would be truncated), a float
    field a finite number (an int becomes a float), a bool a bool, a str a str, a ``tuple[int, ...]`` a list or tuple
    of ints (stored as a tuple). Where ``ranges`` gives (low, high) for a field, its value (each element of a tuple)
    lies in [low, high]; where ``lengths`` gives one, the tuple's length does. A ValueError names the config class, the
    field (and index) and what is allowed."""
    owner = type(config).__name__
    for f in dataclasses.fields(config):
        kind, value = _FIELD_TYPES.get(f.type, f.type), getattr(config, f.name)
        where = f"{owner}.{f.name}"
        if kind is tuple or typing.get_origin(kind) is tuple:
            if not isinstance(value, (tuple, list)):
                raise ValueError(f"{where} = {_shown(value)}: expected a list of integers")
            items = tuple(_checked(f"{where}[{i}]", item, int, ranges.get(f.name)) for i, item in enumerate(value))
            low, high = (lengths or {}).get(f.name, (1, None))
            if len(items) < low or (high is not None and len(items) > high):
                wanted = f"{low} to {high}" if high is not None else f"at least {low}"
                raise ValueError(f"{where} has {len(items)} entries; expected {wanted}")
            value = items
        else:
            value = _checked(where, value, kind, ranges.get(f.name))
        object.__setattr__(config, f.name, value)


# The annotations of config fields as written (``from __future__ import annotations`` keeps them as strings).
_FIELD_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "tuple[int, ...]": tuple}


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _checked(where: str, value, kind, bounds):
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind in names and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
        raise ValueError(f"{where} = {_shown(value)}: expected {names[kind]}")
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{where} = {_shown(value)}: expected a finite number")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{where} = {_shown(value)}: expected {names[kind]} in [{bounds[0]:g}, {bounds[1]:g}]")
    return value


def apply_overrides(config, overrides: dict[str, Any], *, from_text: bool = True):
    """A copy of the dataclass ``config`` with ``overrides``; unknown field names are a TypeError listing the valid ones.
    With ``from_text`` (``--set FIELD=VALUE``), a string given for a field that is not a string is parsed as the
    field's type; without it (a config.json, whose values carry their JSON types), a string stays a string, and the
    config's own checks refuse it where a number is due."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(f"{type(config).__name__}: unknown config field(s) {unknown}; valid fields: {', '.join(fields)}")
    converted = {}
    for key, value in overrides.items():
        current = getattr(config, key)
        if from_text and isinstance(value, str) and current is not None and not isinstance(current, str):
            value = _parse_field(f"{type(config).__name__}.{key}", value, current)
        converted[key] = value
    return dataclasses.replace(config, **converted)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse_field(field: str, text: str, current):
    """``text`` as the type of ``current`` (the field's default); a ValueError naming the field and the expected type."""
    raw = text.strip()
    try:
        if isinstance(current, bool):
            if raw.lower() not in _TRUE + _FALSE:
                raise ValueError
            return raw.lower() in _TRUE
        if isinstance(current, int):
            return ascii_integer(raw, *INT64, signed=True)
        if isinstance(current, float):
            return ascii_decimal(raw)
        if isinstance(current, (tuple, list)):
            items = parse_json(raw, field)  # bounded: finite numbers, no nesting beyond what Python reads
            if not isinstance(items, list):
                raise ValueError
            kind = type(current[0]) if current else None
            if kind is not None and not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
                raise ValueError
            return type(current)(items)
    except ValueError:  # also int()'s and float()'s, and parse_json's InputFileError
        pass
    else:
        return text
    expected = {bool: "a bool (true/false, yes/no, 1/0)", int: "an integer", float: "a number"}.get(type(current))
    if expected is None:
        inner = f" of {type(current[0]).__name__}" if isinstance(current, (tuple, list)) and current else ""
        example = json.dumps(list(current)) if isinstance(current, (tuple, list)) else ""
        expected = f"a JSON list{inner}" + (f" such as {example}" if example else "")
    raise ValueError(f"config field {field} expects {expected}, got {_shown(text)}")


def checkpoint_config(defaults, fields: dict[str, Any], source: str):
    """``defaults`` with the ``fields`` that a checkpoint's config.json gives (through :func:`apply_overrides`); a field
    the config dataclass refuses (TypeError, ValueError) is a CheckpointError naming config.json."""
    try:
        return apply_overrides(defaults, fields, from_text=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: bad config.json: {exc}") from None


# -- weights ----------------------------------------------------------------------------------------------------------
class ParamInit:
    """Deterministic FP32 parameters from a seed: each tensor draws from its own stream keyed by its name,
    so adding a tensor never changes the others."""

    def __init__(self, seed: int):
        self.seed = int(seed)

    def _rng(self, name: str) -> np.random.Generator:
        key = int.from_bytes(name.encode(), "little")  # all of the name: SeedSequence takes ints of any size
        return np.random.default_rng([self.seed, key])

    def normal(self, name: str, shape, std: float, mean: float = 0.0) -> np.ndarray:
        x = self._rng(name).standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        return x

    def uniform(self, name: str, shape, low: float, high: float) -> np.ndarray:
        return self._rng(name).uniform(low, high, size=shape).astype(np.float32)

    @staticmethod
    def constant(shape, value: float) -> np.ndarray:
        return np.full(shape, value, np.float32)


# Tensor dtypes a checkpoint may hold: all are read as float32 (the half-precision ones widened exactly).
CHECKPOINT_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
HALF_PRECISION_DTYPES = ("float16", "bfloat16")


class CheckpointParams(dict):
    """The float32 parameters :func:`take_params` returns, with ``checkpoint_dtypes``: the dtype each tensor had in the
    checkpoint -> how many tensors had it (what :attr:`Model.checkpoint_dtypes` reports)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.checkpoint_dtypes: dict[str, int] = {}
        self.unused: list[str] = []  # tensors not read, accepted with allow_unused
        self.ignored: dict[str, str] = {}  # buffers not read that leave the computation unchanged -> why


# The largest model.safetensors read (its tensors are then checked against the memory the parameters take).
CHECKPOINT_FILE_LIMIT = 256 * GIB
# Parameters and weights may use at most this share of the memory available when they are built.
MEMORY_SHARE = 0.8


def available_memory() -> int:
    """Bytes of memory available to a new allocation: MemAvailable of /proc/meminfo, else the free physical pages."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: not limited here


def check_memory(nbytes: float, what: str, source: str, error: type[ValueError] = ValueError) -> None:
    """``error`` naming ``source`` when ``nbytes`` (of ``what``) exceed :data:`MEMORY_SHARE` of the memory available,
    before anything that size is allocated."""
    budget = MEMORY_SHARE * available_memory()
    if nbytes > budget:
        raise error(f"{source}: {what} need {nbytes / GIB:.3g} GiB, more than the {budget / GIB:.3g} GiB of memory "
                    f"available ({MEMORY_SHARE:.0%} of what is free); a config of these sizes cannot be built here")


def parameter_bytes(shapes: dict[str, tuple[int, ...]]) -> int:
    """Bytes of float32 parameters of these shapes."""
    return 4 * sum(math.prod(shape) for shape in shapes.values())


def check_parameter_memory(shapes: dict[str, tuple[int, ...]], source: str,
                           error: type[ValueError] = ValueError) -> None:
    """The float32 parameters of ``shapes`` fit in memory (:func:`check_memory`), checked before they are built."""
    count = sum(math.prod(shape) for shape in shapes.values())
    check_memory(4 * count, f"its {count:,} float32 parameters", source, error)


class CheckpointTensors(Mapping):
    """The tensors of a ``model.safetensors``, read lazily: names, shapes and dtypes come from its header; a tensor's
    data is read when it is looked up (so that names and shapes are checked, and memory, before any data is read)."""

    def __init__(self, path: Path, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]):
        self.path = Path(path)
        self.shapes = shapes
        self.dtypes = dtypes

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.shapes:
            raise KeyError(name)
        return self.load([name])[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def load(self, names) -> dict[str, np.ndarray]:
        return dict(self.iter_load(names))

    def iter_load(self, names) -> Iterator[tuple[str, np.ndarray]]:
        """(name, array) of ``names``, one tensor read at a time."""
        try:
            with safe_open(str(self.path), framework="numpy") as handle:
                for name in names:
                    yield name, handle.get_tensor(name)
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise CheckpointError(f"checkpoint {str(self.path)!r} is corrupted or truncated: {exc}") from None


def read_checkpoint(directory) -> tuple[dict[str, Any], CheckpointTensors]:
    """``config.json`` and the header of ``model.safetensors`` of a transformers ``save_pretrained`` directory (never
    unpickles): both regular files (a FIFO or device is refused before it is opened), config.json a JSON object of at
    most :data:`boundedio.JSON_CONFIG_LIMIT` bytes, UTF-8, with finite numbers of sensible length."""
    path = Path(directory)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise CheckpointError(f"checkpoint directory {str(path)!r} {what} (expected config.json + model.safetensors)")
    config_path = path / "config.json"
    weights_path = path / "model.safetensors"
    for needed in (config_path, weights_path):
        if not needed.exists():
            raise CheckpointError(f"checkpoint {str(path)!r} lacks {needed.name} (expected config.json + model.safetensors)")
    try:
        config = load_json(config_path, "a checkpoint's config.json", JSON_CONFIG_LIMIT, CheckpointError)
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {str(config_path)!r} is not a JSON object (it holds a {type(config).__name__})")
    regular_file(weights_path, "a model.safetensors file", CHECKPOINT_FILE_LIMIT, CheckpointError)
    try:
        with safe_open(str(weights_path), framework="numpy") as handle:
            names = list(handle.keys())
            slices = {name: handle.get_slice(name) for name in names}
            shapes = {name: tuple(int(n) for n in part.get_shape()) for name, part in slices.items()}
            dtypes = {name: str(part.get_dtype()) for name, part in slices.items()}
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {str(weights_path)!r} is corrupted or truncated: {exc}") from None
    return config, CheckpointTensors(weights_path, shapes, dtypes)


# Buffers a transformers or torch checkpoint may hold that these models compute without (checked, then not read).
_POSITION_IDS = "position_ids"  # transformers' embeddings.position_ids: the positions 0, 1, 2, ...
_BATCHES_TRACKED = "num_batches_tracked"  # torch BatchNorm's count of training steps; inference uses running stats
_INTEGER_CODES = ("I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8")


def _known_buffer(tensors, name: str) -> str | None:
    """Why the buffer ``name`` of ``tensors`` leaves the computation unchanged, or None when it is not such a buffer
    (or does not hold what such a buffer holds)."""
    last = name.rsplit(".", 1)[-1]
    if last not in (_POSITION_IDS, _BATCHES_TRACKED):
        return None
    shape = _shape(tensors, name)
    dtype = tensors.dtypes.get(name) if isinstance(tensors, CheckpointTensors) else None
    if dtype is not None and dtype not in _INTEGER_CODES:
        return None
    if last == _BATCHES_TRACKED:
        return "torch BatchNorm's count of training steps (inference uses the running statistics)" \
            if math.prod(shape) == 1 else None
    if len(shape) not in (1, 2) or math.prod(shape) > (1 << 24):
        return None
    values = np.asarray(tensors[name]).reshape(-1)
    if not np.array_equal(values, np.arange(values.size)):
        return None
    return "the positions 0, 1, 2, ... that the model uses without reading them"


def _shape(tensors, name: str) -> tuple[int, ...]:
    if isinstance(tensors, CheckpointTensors):
        return tensors.shapes[name]
    return tuple(np.shape(tensors[name]))


def _listed(names: list[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(n) for n in names[:shown]) + more


def take_params(tensors, expected: dict[str, tuple[int, ...]], source: str, *, allow_unused: bool = False,
                ignorable: dict[str, str] | Callable[[str], str | None] | None = None) -> dict[str, np.ndarray]:
    """Exactly the ``expected`` tensors, as float32, each checked by name and shape (from the file's header, before
    its data is read) and their total size against the memory available; errors name the first mismatch.

    Every tensor of the checkpoint must be one the model reads: a tensor the config does not use (a second layer of a
    checkpoint whose config.json says one) would judge another model than the checkpoint, so it is a CheckpointError
    naming them, unless ``allow_unused`` (the model then lists them in ``unused_tensors``). Buffers known to leave the
    computation unchanged (``position_ids`` holding 0, 1, 2, ...; BatchNorm's ``num_batches_tracked``) and the names
    ``ignorable`` gives a reason for (a dict name -> why, or a function of the name returning why or None) are not read
    and are listed in ``ignored_tensors``."""
    known = ignorable.get if isinstance(ignorable, dict) else (ignorable or (lambda name: None))
    missing = [name for name in expected if name not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{source}: missing tensor {missing[0]!r} of shape {tuple(expected[missing[0]])}{more}")
    ignored, unused = {}, []
    for name in tensors:
        if name in expected:
            continue
        why = known(name) or _known_buffer(tensors, name)
        if why is not None:
            ignored[name] = why
        else:
            unused.append(name)
    if unused and not allow_unused:
        raise CheckpointError(f"{source}: model.safetensors holds {len(unused)} tensor(s) that its config.json does not "
                              f"use: {_listed(sorted(unused))}; every tensor must be used (a config.json that does not "
                              "describe the weights, e.g. fewer layers than stored, would judge another model). Correct "
                              "config.json, or pass --allow-unused-weights to judge the model without them (the report "
                              "lists them)")
    for name, shape in expected.items():
        if _shape(tensors, name) != tuple(shape):
            raise CheckpointError(f"{source}: tensor {name!r} has shape {_shape(tensors, name)}, expected {tuple(shape)}")
    check_parameter_memory(expected, source, CheckpointError)
    params = CheckpointParams()
    params.unused = sorted(unused)
    params.ignored = dict(sorted(ignored.items()))
    loaded = tensors.iter_load(expected) if isinstance(tensors, CheckpointTensors) else \
        ((name, tensors[name]) for name in expected)
    for name, arr in loaded:
        dtype = str(arr.dtype)
        if dtype not in CHECKPOINT_FLOAT_DTYPES:
            raise CheckpointError(f"{source}: tensor {name!r} in model.safetensors has dtype {dtype}; expected a float dtype "
                                  f"({', '.join(CHECKPOINT_FLOAT_DTYPES)})")
        value = np.ascontiguousarray(arr, dtype=np.float32)
        finite = np.isfinite(value)
        if not finite.all():
            bad = int(value.size - np.count_nonzero(finite))
            raise CheckpointError(f"{source}: tensor {name!r} in model.safetensors has {bad} non-finite value(s) (NaN or Inf) "
                                  f"of {value.size}")
        params[name] = value
        params.checkpoint_dtypes[dtype] = params.checkpoint_dtypes.get(dtype, 0) + 1
    return params


# -- the cache of seeded weights ----------------------------------------------------------------------------------------
class SeededWeightStore(Protocol):
    """Where seeded weights built once are kept (the suite gives one: :func:`use_seeded_weight_store`).

    ``has`` says whether an entry is kept under ``key`` (to say before a model is built whether it will take long);
    ``load`` returns the parameters saved under ``key`` (a JSON object: :func:`seeded_key`), or None when there are
    none or they cannot be used (a damaged entry is the store's to report, and is then built again and replaced);
    ``save`` keeps them (it may fail quietly: a cache that cannot be written costs only time)."""

    def load(self, model: str, key: dict) -> dict[str, np.ndarray] | None: ...

    def has(self, model: str, key: dict) -> bool: ...

    def save(self, model: str, key: dict, params: dict[str, np.ndarray]) -> None: ...


_STORE: list[SeededWeightStore | None] = [None]


def use_seeded_weight_store(store: SeededWeightStore | None) -> SeededWeightStore | None:
    """Keep the seeded weights that :func:`models.load_model` builds in ``store`` (None: build them every time, the
    default); returns the store used before, to put back."""
    previous, _STORE[0] = _STORE[0], store
    return previous


def seeded_weight_store() -> SeededWeightStore | None:
    return _STORE[0]


_MODELS_DIRECTORY = Path(__file__).resolve().parent


@functools.cache
def recipe_version() -> str:
    """The version of the recipes that build seeded weights: the SHA-256 of this package's sources (the recipes, the
    FP32 forward that fits the heads) and numpy's version (its random streams and float32 maths), so that any change
    to either builds them again rather than reading another recipe's weights."""
    h = hashlib.sha256(f"numpy {np.__version__}|".encode())
    for path in sorted(_MODELS_DIRECTORY.glob("*.py")):
        h.update(f"{path.name}|".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def seeded_key(model: str, config, seed: int) -> dict:
    """What a model's seeded weights are a function of, as a JSON object: the model, its whole config, the seed, the
    recipes' version (:func:`recipe_version`) and the host's arithmetic (a recipe that runs the model, as resnet50's
    batch statistics do, gets other bits from another BLAS kernel: :func:`models.blas.host_arithmetic`)."""
    fields = json.loads(json.dumps(dataclasses.asdict(config), sort_keys=True, default=str))
    return {"model": model, "config": fields, "seed": int(seed), "recipe": recipe_version(),
            "host": json.loads(json.dumps(host_arithmetic()))}


def cached_params(params: Mapping[str, np.ndarray], shapes: dict[str, tuple[int, ...]], source: str) -> dict[str, np.ndarray]:
    """The parameters a store gave back, exactly ``shapes``' names and shapes, float32 and finite (a CheckpointError
    naming ``source`` and the first difference otherwise)."""
    names, expected = set(params), set(shapes)
    if names != expected:
        differ = sorted(names ^ expected)
        raise CheckpointError(f"{source}: holds other tensors than the model's ({_listed(differ)} differ)")
    for name, shape in shapes.items():
        value = params[name]
        if value.dtype != np.float32 or tuple(value.shape) != tuple(shape):
            raise CheckpointError(f"{source}: tensor {name!r} is {value.dtype} {tuple(value.shape)}, expected float32 "
                                  f"{tuple(shape)}")
        if not np.isfinite(value).all():
            raise CheckpointError(f"{source}: tensor {name!r} has non-finite values")
    return dict(params)
