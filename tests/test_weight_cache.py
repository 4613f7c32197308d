"""The cache of seeded weights: built once per machine, read back bit for bit, keyed by everything the weights are a
function of, and a damaged entry rebuilt with a warning, never used."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from conformance.datasets.cache import (
    WEIGHT_CACHE_VARIABLE,
    WeightCache,
    cached_seeded_weights,
    weight_cache,
    weight_cache_enabled,
)
from conformance.fileio import write_entry
from conformance.settings.options import SettingsError, check_environment
from models import load_model
from models.base import recipe_version, seeded_key, seeded_weight_store, use_seeded_weight_store
from models.blas import host_arithmetic
from models.widedeep import build_config

# a small wide&deep (seeded weights built in well under a second)
SMALL = {"bucket_sizes": (50, 40, 30), "hidden_sizes": (16, 8)}


@pytest.fixture
def cache(tmp_path):
    store = WeightCache(tmp_path)
    previous = use_seeded_weight_store(store)
    yield store
    use_seeded_weight_store(previous)


def _built():
    previous = use_seeded_weight_store(None)
    try:
        return load_model("widedeep", seed=0, **SMALL)
    finally:
        use_seeded_weight_store(previous)


def _same(a, b) -> bool:
    return type(a) is type(b) and a.config == b.config and set(a.params) == set(b.params) and all(
        a.params[k].dtype == b.params[k].dtype and np.array_equal(a.params[k], b.params[k]) for k in a.params)


def _entry(store: WeightCache, seed: int = 0, **overrides):
    key = seeded_key("widedeep", build_config(**{**SMALL, **overrides}), seed)
    return key, store.path("widedeep", key)


def test_weights_are_built_once_and_read_back_bit_for_bit(cache, monkeypatch):
    reference = _built()
    key, path = _entry(cache)
    assert not path.exists()
    first = load_model("widedeep", seed=0, **SMALL)  # cold: built and written
    assert path.is_file() and _same(first, reference)
    built = []
    monkeypatch.setattr("models.widedeep.seeded_params", lambda *a, **k: built.append(1))  # a build would fail
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = load_model("widedeep", seed=0, **SMALL)  # warm: read, not built
    assert not built and _same(second, reference)
    outputs = [m(reference.sample_inputs(4, seed=3)) for m in (reference, second)]
    assert all(np.array_equal(outputs[0][k], outputs[1][k]) for k in outputs[0])


def test_the_key_holds_model_config_seed_and_recipe(cache):
    key, path = _entry(cache)
    assert key["model"] == "widedeep" and key["seed"] == 0 and key["recipe"] == recipe_version()
    assert key["config"]["hidden_sizes"] == [16, 8]
    assert key["host"] == json.loads(json.dumps(host_arithmetic()))
    paths = {path, _entry(cache, seed=1)[1], _entry(cache, embedding_dim=8)[1],
             cache.path("widedeep", {**key, "recipe": "another recipe"}),
             cache.path("widedeep", {**key, "host": {**key["host"], "numpy": "another numpy"}})}
    assert len(paths) == 5
    other_seed = load_model("widedeep", seed=1, **SMALL)
    load_model("widedeep", seed=0, **SMALL)
    assert _entry(cache, seed=1)[1].is_file() and path.is_file()
    assert not _same(other_seed, _built())


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x40  # inside the stored arrays (stored uncompressed)
    path.write_bytes(bytes(data))


def _garbage(path):
    path.write_bytes(b"not an npz archive")


def _another_key(path):
    write_entry(path, {"x": np.zeros(3, np.float32)}, {"format": 1, "model": "widedeep", "key": {"seed": 99}})


@pytest.mark.parametrize("damage", [_truncate, _flip_byte, _garbage, _another_key])
def test_a_damaged_entry_is_rebuilt_with_a_warning_never_used(cache, damage):
    reference = _built()
    load_model("widedeep", seed=0, **SMALL)
    _, path = _entry(cache)
    damage(path)
    with pytest.warns(UserWarning, match=r"could not be used .*built again and the entry replaced"):
        model = load_model("widedeep", seed=0, **SMALL)
    assert _same(model, reference)
    assert str(path) in cache.replaced
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the replaced entry is good again
        assert _same(load_model("widedeep", seed=0, **SMALL), reference)


def test_an_entry_of_other_tensors_under_the_right_key_is_rebuilt(cache):
    """An entry that reads back intact but does not hold the model's tensors (names, shapes, dtype) is not used."""
    reference = _built()
    key, path = _entry(cache)
    tampered = dict(reference.params)
    name = next(iter(tampered))
    tampered[name] = tampered[name][:1]
    write_entry(path, tampered, {"format": 1, "model": "widedeep", "key": key})
    with pytest.warns(UserWarning, match=rf"{name}.*building them again"):
        model = load_model("widedeep", seed=0, **SMALL)
    assert _same(model, reference)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _same(load_model("widedeep", seed=0, **SMALL), reference)


def test_the_cache_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv(WEIGHT_CACHE_VARIABLE, "0")
    assert not weight_cache_enabled() and weight_cache(tmp_path) is None
    with cached_seeded_weights(tmp_path):
        assert seeded_weight_store() is None
        load_model("widedeep", seed=0, **SMALL)
    assert not (tmp_path / "weights").exists()
    monkeypatch.setenv(WEIGHT_CACHE_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match=WEIGHT_CACHE_VARIABLE):
        weight_cache_enabled()
    with pytest.raises(SettingsError, match=rf"{WEIGHT_CACHE_VARIABLE}='sometimes' is not a switch"):
        check_environment()


def test_the_store_is_put_back_after_the_block(tmp_path, monkeypatch):
    monkeypatch.delenv(WEIGHT_CACHE_VARIABLE, raising=False)
    before = seeded_weight_store()
    with cached_seeded_weights(tmp_path):
        assert isinstance(seeded_weight_store(), WeightCache)
        load_model("widedeep", seed=0, **SMALL)
    assert seeded_weight_store() is before
    assert len(list((tmp_path / "weights").glob("widedeep-*.npz"))) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_directory_that_cannot_be_written_builds_without_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(WEIGHT_CACHE_VARIABLE, raising=False)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.warns(UserWarning, match="built in every run"):
            assert weight_cache(locked) is None
    finally:
        locked.chmod(0o700)


def test_an_entry_that_cannot_be_written_costs_only_time(cache):
    cache.directory.mkdir(parents=True)
    _, path = _entry(cache)
    path.mkdir()  # a directory where the entry would go: the write fails
    with pytest.warns(UserWarning) as caught:
        model = load_model("widedeep", seed=0, **SMALL)
    said = [str(w.message) for w in caught]
    assert len(said) == 2, said
    assert "could not be used" in said[0] and "a folder; expected a cache entry" in said[0], said  # not read as one
    assert "could not be cached" in said[1], said
    assert _same(model, _built())
