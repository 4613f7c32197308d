"""The six models of the seed benchmark, in plain numpy, computing through a hardware's ops object.

``load_model(name, checkpoint=None, seed=0, **config_overrides)`` returns a callable :class:`models.base.Model`:
``model(inputs, ops=None) -> outputs`` with dicts of numpy arrays named as in transformers' forward.
Each model module exposes ``load(checkpoint=None, seed=0, **overrides)`` and its config dataclass.
"""

from __future__ import annotations

import importlib

from models.base import CheckpointError, InputError, Model, run_batched

# Registry name -> module. The names are those of the test ids (``bert-base-fp8``).
_MODULES = {
    "albert": "models.albert",
    "bert-base": "models.bert",
    "conformer": "models.conformer",
    "resnet50": "models.resnet50",
    "roformer": "models.roformer",
    "widedeep": "models.widedeep",
}
MODEL_NAMES = tuple(_MODULES)

# Names the seed benchmark and MLPerf use for the same models.
ALIASES = {
    "bert": "bert-base",
    "albert-base": "albert",
    "resnet50-v1.5": "resnet50",
    "wide&deep": "widedeep",
    "wide_and_deep": "widedeep",
}


def canonical_name(name: str) -> str:
    """The registry name for ``name`` or an alias; a ValueError listing the valid names otherwise."""
    key = ALIASES.get(name, name)
    if key not in _MODULES:
        raise ValueError(f"unknown model {name!r}; expected one of: {', '.join(MODEL_NAMES)}")
    return key


def model_module(name: str):
    return importlib.import_module(_MODULES[canonical_name(name)])


def load_model(name: str, checkpoint=None, seed: int = 0, **config_overrides) -> Model:
    """Build a model: seeded FP32 weights at the seed-benchmark size, or a transformers checkpoint directory."""
    return model_module(name).load(checkpoint=checkpoint, seed=seed, **config_overrides)


__all__ = ["MODEL_NAMES", "ALIASES", "CheckpointError", "InputError", "Model", "canonical_name", "load_model", "model_module", "run_batched"]
