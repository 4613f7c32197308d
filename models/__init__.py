"""The models: the six of the seed benchmark, in plain numpy, computing through a hardware's ops object, and any a
package registers in the entry-point group ``ipu_conformance.models`` (each entry point names a
:class:`models.spec.ModelSpec`; the six register there too).

``load_model(name, checkpoint=None, seed=0, **config_overrides)`` returns a callable :class:`models.base.Model`:
``model(inputs, ops=None) -> outputs`` with dicts of numpy arrays named as in transformers' forward.
Each model module exposes ``load(checkpoint=None, seed=0, **overrides)`` and its config dataclass.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from importlib import metadata

from models.base import CheckpointError, InputError, Model, run_batched, seeded_key, seeded_weight_store
from models.spec import SPEC_ENTRY_POINT_GROUP, ModelSpec

_BUILTIN_HINT = ("the project's entry points are read from its installed metadata: after pulling a change to "
                 "pyproject.toml's entry points, reinstall it (pip install -e .)")


class ModelRegistryError(ValueError):
    """An entry point of ``ipu_conformance.models`` that does not give a usable spec, or a name claimed twice."""


def _entry_points() -> dict:
    found = {}
    for entry in metadata.entry_points(group=SPEC_ENTRY_POINT_GROUP):
        if entry.name in found and found[entry.name].value != entry.value:
            raise ModelRegistryError(f"model {entry.name!r} is registered twice in the entry-point group "
                                     f"{SPEC_ENTRY_POINT_GROUP!r}: {found[entry.name].value} and {entry.value}")
        found[entry.name] = entry
    if not found:
        raise ModelRegistryError(f"no models registered in the entry-point group {SPEC_ENTRY_POINT_GROUP!r}; "
                                 + _BUILTIN_HINT)
    return found


@functools.lru_cache(maxsize=None)
def _spec(name: str) -> ModelSpec:
    entry = _ENTRY_POINTS[name]
    try:
        spec = entry.load()
    except Exception as exc:  # a plugin's import error, shown with the entry point that caused it
        raise ModelRegistryError(f"model {name!r} ({entry.value}, entry-point group {SPEC_ENTRY_POINT_GROUP!r}) "
                                 f"failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, ModelSpec):
        raise ModelRegistryError(f"model {name!r} ({entry.value}): expected a models.spec.ModelSpec, got "
                                 f"{type(spec).__name__}")
    if spec.name != name:
        raise ModelRegistryError(f"model {name!r} ({entry.value}): its spec is named {spec.name!r}; the entry "
                                 "point's name and the spec's must be the same")
    return spec


_ENTRY_POINTS = _entry_points()
# The registry names, sorted (the names of the test ids, ``bert-base-fp8``).
MODEL_NAMES = tuple(sorted(_ENTRY_POINTS))


def model_spec(name: str) -> ModelSpec:
    """The spec of model ``name`` or an alias (a ValueError listing the valid names otherwise)."""
    return _spec(canonical_name(name))


def model_specs() -> dict[str, ModelSpec]:
    """Every registered model's spec, by name."""
    return {name: _spec(name) for name in MODEL_NAMES}


@functools.lru_cache(maxsize=1)
def aliases() -> dict[str, str]:
    """Other names the models answer to (the seed benchmark's and MLPerf's), to their registry names."""
    table = {}
    for name in MODEL_NAMES:
        for alias in _spec(name).aliases:
            if alias in MODEL_NAMES or table.get(alias, name) != name:
                raise ModelRegistryError(f"alias {alias!r} of model {name!r} is already the name or an alias of "
                                         f"{table.get(alias, alias)!r}")
            table[alias] = name
    return table


def canonical_name(name: str) -> str:
    """The registry name for ``name`` or an alias; a ValueError listing the valid names otherwise."""
    if name in _ENTRY_POINTS:
        return name
    key = aliases().get(name, name)
    if key not in _ENTRY_POINTS:
        raise ValueError(f"unknown model {name!r}; expected one of: {', '.join(MODEL_NAMES)}")
    return key


def model_module(name: str):
    return importlib.import_module(model_spec(name).module)


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
        model = _seeded(module, name, seed, config_overrides)
        model.weight_seed = int(seed)
        return model
    try:
        return module.load(checkpoint=checkpoint, seed=seed, allow_unused=allow_unused_weights, **config_overrides)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as exc:  # config.json's sizes that the config dataclass refuses, and overrides
        raise CheckpointError(f"{name} checkpoint {str(checkpoint)!r}: {exc}") from None


def _seeded(module, name: str, seed: int, config_overrides: dict) -> Model:
    store = seeded_weight_store()
    if store is None:
        return module.load(checkpoint=None, seed=seed, **config_overrides)
    key = seeded_key(canonical_name(name), module.build_config(**config_overrides), seed)
    params = store.load(key["model"], key)
    if params is not None:
        try:
            return module.assemble(module.build_config(**config_overrides), params)
        except CheckpointError as exc:
            warnings.warn(f"{exc}; building them again", stacklevel=3)
    model = module.load(checkpoint=None, seed=seed, **config_overrides)
    store.save(key["model"], key, model.params)
    return model


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


__all__ = ["MODEL_NAMES", "ModelRegistryError", "ModelSpec", "aliases", "model_spec", "model_specs", "CheckpointError", "InputError", "Model", "canonical_name", "host_bytes", "load_model", "model_module", "run_batched", "seeded_weights_kept"]
