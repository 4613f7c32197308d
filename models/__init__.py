"""The six models of the seed benchmark, in plain numpy, computing through a hardware's ops object.

``load_model(name, checkpoint=None, seed=0, **config_overrides)`` returns a callable :class:`models.base.Model`:
``model(inputs, ops=None) -> outputs`` with dicts of numpy arrays named as in transformers' forward.
Each model module exposes ``load(checkpoint=None, seed=0, **overrides)`` and its config dataclass.
"""

from __future__ import annotations

import importlib
import warnings

from models.base import CheckpointError, InputError, Model, run_batched, seeded_key, seeded_weight_store

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


def load_model(name: str, checkpoint=None, seed: int = 0, allow_unused_weights: bool = False,
               **config_overrides) -> Model:
    """Build a model: seeded FP32 weights at the seed-benchmark size, or a transformers checkpoint directory, every
    tensor of which the model must use unless ``allow_unused_weights`` (see :func:`models.base.take_params`). A
    checkpoint's problems are CheckpointErrors naming it; a config value outside its type or range is a ValueError
    naming the field.

    Seeded weights are read from the store :func:`models.base.use_seeded_weight_store` set, when there is one and it
    holds this model's, config's, seed's and recipes' (:func:`models.base.seeded_key`); otherwise they are built and
    saved there. Weights the store gives back that are not exactly the model's tensors are built again, with a
    warning, and replaced."""
    module = model_module(name)
    if checkpoint is None:
        store = seeded_weight_store()
        if store is None:
            return module.load(checkpoint=None, seed=seed, **config_overrides)
        key = seeded_key(canonical_name(name), module.build_config(**config_overrides), seed)
        params = store.load(key["model"], key)
        if params is not None:
            try:
                return module.assemble(module.build_config(**config_overrides), params)
            except CheckpointError as exc:
                warnings.warn(f"{exc}; building them again", stacklevel=2)
        model = module.load(checkpoint=None, seed=seed, **config_overrides)
        store.save(key["model"], key, model.params)
        return model
    try:
        return module.load(checkpoint=checkpoint, seed=seed, allow_unused=allow_unused_weights, **config_overrides)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as exc:  # config.json's sizes that the config dataclass refuses, and overrides
        raise CheckpointError(f"{name} checkpoint {str(checkpoint)!r}: {exc}") from None


def seeded_weights_kept(name: str, seed: int = 0, **config_overrides) -> bool:
    """Whether :func:`load_model` will read ``name``'s seeded weights from the store rather than build them (an entry
    there may still turn out damaged, and then they are built)."""
    store = seeded_weight_store()
    if store is None:
        return False
    key = seeded_key(canonical_name(name), model_module(name).build_config(**config_overrides), seed)
    return store.has(key["model"], key)


def host_bytes(name: str, batch: int, **config_overrides) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` samples) of model
    ``name`` with ``config_overrides``, from its config alone (nothing is built); a ValueError naming the field for an
    override outside its type or range."""
    module = model_module(name)
    return module.host_bytes(module.build_config(**config_overrides), int(batch))


__all__ = ["MODEL_NAMES", "ALIASES", "CheckpointError", "InputError", "Model", "canonical_name", "host_bytes", "load_model", "model_module", "run_batched", "seeded_weights_kept"]
