"""The FP32 output cache of users' checkpoints and data: a changed input is a different entry, a stored entry is read
back instead of recomputed, a damaged one is recomputed, and nothing is stored when computing fails."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.datasets import DatasetError, EvaluationSet
from conformance.datasets.cache import CacheError, OutputCache, check_writable, code_version, entry_key
from conformance.datasets.user import UserInputError, load_cases, load_checkpoint
from models import CheckpointError, load_model
from models.widedeep import save_checkpoint


def _outputs():
    return {"probabilities": np.arange(6, dtype=np.float32).reshape(3, 2)}


def test_an_entry_is_computed_once_then_read_back(tmp_path):
    cache = OutputCache(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return _outputs()

    first, hit1 = cache.get_or_compute("widedeep", "k" * 64, compute)
    second, hit2 = cache.get_or_compute("widedeep", "k" * 64, compute)
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    np.testing.assert_array_equal(first["probabilities"], second["probabilities"])


def test_a_damaged_entry_is_recomputed_and_replaced(tmp_path):
    cache = OutputCache(tmp_path)
    cache.get_or_compute("widedeep", "d" * 64, _outputs)
    cache.path("widedeep", "d" * 64).write_bytes(b"not an npz")
    with pytest.warns(UserWarning, match="not a readable .npz archive.*computed again and replaced"):
        outputs, hit = cache.get_or_compute("widedeep", "d" * 64, _outputs)
    assert not hit and outputs["probabilities"].shape == (3, 2)
    assert cache.get_or_compute("widedeep", "d" * 64, _outputs)[1]


def test_nothing_is_stored_when_computing_fails(tmp_path):
    cache = OutputCache(tmp_path)

    def broken():
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("widedeep", "f" * 64, broken)
    assert not list(tmp_path.rglob("*.npz")) and not list(tmp_path.rglob("*.tmp"))


def test_the_key_changes_with_each_input():
    base = entry_key("widedeep", {"model.safetensors": "a"}, {"sha256": "x", "count": 4}, code="c1")
    assert base == entry_key("widedeep", {"model.safetensors": "a"}, {"count": 4, "sha256": "x"}, code="c1")
    changed = [entry_key("albert", {"model.safetensors": "a"}, {"sha256": "x", "count": 4}, code="c1"),
               entry_key("widedeep", {"model.safetensors": "b"}, {"sha256": "x", "count": 4}, code="c1"),
               entry_key("widedeep", {"model.safetensors": "a"}, {"sha256": "y", "count": 4}, code="c1"),
               entry_key("widedeep", {"model.safetensors": "a"}, {"sha256": "x", "count": 5}, code="c1"),
               entry_key("widedeep", {"model.safetensors": "a"}, {"sha256": "x", "count": 4}, code="c2")]
    assert len({base, *changed}) == 6
    assert len(code_version()) == 64 and code_version() == code_version()


def test_a_changed_checkpoint_has_another_fingerprint(tmp_path):
    model = load_model("widedeep", seed=1, hidden_sizes=(32,), bucket_sizes=(7,) * 26)
    save_checkpoint(model, tmp_path / "a")
    _, first = load_checkpoint("widedeep", tmp_path / "a")
    model.params["deep.head.bias"] = model.params["deep.head.bias"] + np.float32(1.0)
    save_checkpoint(model, tmp_path / "a")
    _, second = load_checkpoint("widedeep", tmp_path / "a")
    assert first["sha256"] != second["sha256"]
    assert first["config"]["hidden_sizes"] == [32] and first["dtypes"] == {"float32": len(model.params)}


def test_a_checkpoint_of_another_model_is_named(tmp_path):
    save_checkpoint(load_model("widedeep", seed=1, hidden_sizes=(32,), bucket_sizes=(7,) * 26), tmp_path / "wd")
    with pytest.raises(CheckpointError, match="model_type 'widedeep'; a resnet50 checkpoint has 'resnet'"):
        load_checkpoint("resnet50", tmp_path / "wd")


def test_a_failed_data_set_is_a_usage_error_and_caches_nothing(tmp_path, monkeypatch):
    import conformance.datasets as datasets

    def failing(name, path, model, checkpoint=None, limit=None, stream=False):
        raise DatasetError(f"{path}:3: label 'x' is not 0 or 1")

    monkeypatch.setattr("conformance.datasets.user.load_dataset", failing)
    (tmp_path / "rows.tsv").write_text("")
    with pytest.raises(UserInputError, match=r"--dataset widedeep=.*rows.tsv:3: label 'x'"):
        load_cases(("widedeep",), {}, {"widedeep": tmp_path / "rows.tsv"}, {})
    assert datasets.FORMAT_MODULES["widedeep"]  # the registry is untouched


def test_an_empty_data_set_is_refused(tmp_path, monkeypatch):
    def empty(name, path, model, checkpoint=None, limit=None, stream=False):
        return EvaluationSet(name, {}, 0, {"format": "criteo-tsv"})

    monkeypatch.setattr("conformance.datasets.user.load_dataset", empty)
    with pytest.raises(UserInputError, match="holds no evaluation samples"):
        load_cases(("widedeep",), {}, {"widedeep": tmp_path}, {})


def test_options_for_unselected_models_are_refused(tmp_path):
    with pytest.raises(UserInputError, match=r"--samples bert-base=\.\.\.: model 'bert-base' is not selected"):
        load_cases(("widedeep",), {}, {}, {"bert-base": 3})


def test_a_cache_directory_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(CacheError, match="is not a directory"):
        check_writable(tmp_path / "f")
    assert check_writable(tmp_path / "new" / "dir").is_dir()
