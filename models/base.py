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
        if isinstance(value, str) and not isinstance(current, str):
            value = type(current)(json.loads(value)) if not isinstance(current, bool) else value.lower() in ("1", "true", "yes")
        converted[key] = value
    return dataclasses.replace(config, **converted)


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
    params = {}
    for name, shape in expected.items():
        arr = tensors[name]
        if tuple(arr.shape) != tuple(shape):
            raise CheckpointError(f"{source}: tensor {name!r} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
        params[name] = np.ascontiguousarray(arr, dtype=np.float32)
    return params
