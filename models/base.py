"""What the six models share: the Model protocol, input validation, seeded weights and checkpoint loading.

A model is built from a config dataclass and a dict of FP32 parameters named as in the transformers checkpoint of the same
architecture. ``model(inputs, ops)`` validates the inputs against :attr:`Model.input_specs` and runs :meth:`Model.forward`
through ``ops`` (the FP32 reference when none is given).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

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
    "int": lambda dt: np.issubdtype(dt, np.integer),
    "float": lambda dt: np.issubdtype(dt, np.floating),
    "bool": lambda dt: dt == np.bool_ or np.issubdtype(dt, np.integer),
}


class Model:
    """Base class of the six models. Subclasses set ``name``, ``output_names`` and implement the abstract methods."""

    name: ClassVar[str] = ""
    output_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config, params: dict[str, np.ndarray]):
        self.config = config
        self.params = params
        # dtype name -> number of tensors, as stored in the checkpoint the parameters came from ({} for seeded weights)
        self.checkpoint_dtypes: dict[str, int] = dict(getattr(params, "checkpoint_dtypes", {}))

    # -- to implement --------------------------------------------------------------------------------------------
    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        raise NotImplementedError

    def forward(self, inputs: dict[str, np.ndarray], ops: Ops) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def sample_inputs(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic inputs that look like the real data set's, for ``batch_size`` samples."""
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------------------------
    def __call__(self, inputs: dict[str, np.ndarray], ops: Ops | None = None) -> dict[str, np.ndarray]:
        self.validate_inputs(inputs)
        return self.forward(inputs, FP32 if ops is None else ops)

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
            if not isinstance(arr, np.ndarray):
                raise InputError(f"{self.name}: input {spec.name!r} must be a numpy array, got {type(arr).__name__}")
            if not _KIND_CHECK[spec.kind](arr.dtype):
                raise InputError(f"{self.name}: input {spec.name!r} has dtype {arr.dtype}, expected {spec.kind} ({spec.describe()})")
            if arr.ndim != len(spec.shape) + 1 or tuple(arr.shape[1:]) != tuple(spec.shape):
                raise InputError(f"{self.name}: input {spec.name!r} has shape {tuple(arr.shape)}, expected {spec.describe()}")
            if spec.kind == "float" and not np.all(np.isfinite(arr)):
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
    return {k: np.concatenate(v) for k, v in parts.items()}


# -- configs ----------------------------------------------------------------------------------------------------------
def apply_overrides(config, overrides: dict[str, Any]):
    """A copy of the dataclass ``config`` with ``overrides``; unknown field names are a TypeError listing the valid ones."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(f"{type(config).__name__}: unknown config field(s) {unknown}; valid fields: {', '.join(fields)}")
    converted = {}
    for key, value in overrides.items():
        current = getattr(config, key)
        if isinstance(value, str) and current is not None and not isinstance(current, str):
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
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, (tuple, list)):
            items = json.loads(raw)
            if not isinstance(items, list):
                raise ValueError
            kind = type(current[0]) if current else None
            if kind is not None and not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
                raise ValueError
            return type(current)(items)
    except (ValueError, json.JSONDecodeError):
        pass
    else:
        return text
    expected = {bool: "a bool (true/false, yes/no, 1/0)", int: "an integer", float: "a number"}.get(type(current))
    if expected is None:
        inner = f" of {type(current[0]).__name__}" if isinstance(current, (tuple, list)) and current else ""
        example = json.dumps(list(current)) if isinstance(current, (tuple, list)) else ""
        expected = f"a JSON list{inner}" + (f" such as {example}" if example else "")
    raise ValueError(f"config field {field} expects {expected}, got {text!r}")


def checkpoint_config(defaults, fields: dict[str, Any], source: str):
    """``defaults`` with the ``fields`` that a checkpoint's config.json gives (through :func:`apply_overrides`); a field
    the config dataclass refuses (TypeError, ValueError) is a CheckpointError naming config.json."""
    try:
        return apply_overrides(defaults, fields)
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


def read_checkpoint(directory) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``config.json`` and ``model.safetensors`` of a transformers ``save_pretrained`` directory (never unpickles)."""
    path = Path(directory)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist (expected config.json + model.safetensors)")
    config_path = path / "config.json"
    weights_path = path / "model.safetensors"
    for needed in (config_path, weights_path):
        if not needed.is_file():
            raise CheckpointError(f"checkpoint {str(path)!r} lacks {needed.name} (expected config.json + model.safetensors)")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"checkpoint {str(config_path)!r} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint {str(config_path)!r} is not a JSON object (it holds a {type(config).__name__})")
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {str(weights_path)!r} is corrupted or truncated: {exc}") from None
    return config, tensors


def take_params(tensors: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], source: str) -> dict[str, np.ndarray]:
    """Exactly the ``expected`` tensors, as float32, each checked by name and shape; errors name the first mismatch."""
    missing = [name for name in expected if name not in tensors]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{source}: missing tensor {missing[0]!r} of shape {tuple(expected[missing[0]])}{more}")
    params = CheckpointParams()
    for name, shape in expected.items():
        arr = tensors[name]
        if tuple(arr.shape) != tuple(shape):
            raise CheckpointError(f"{source}: tensor {name!r} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
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
