"""The reference-output store: hashes are checked, and every problem is a clear error naming the file."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from conformance.accuracy import reference
from conformance.fileio import atomic_path, write_text_atomic
from models import canonical_name, load_model


@dataclass(frozen=True)
class TinyConfig:
    width: int = 3


class TinyModel:
    """A stand-in model with the parts of the Model API the store uses."""

    name = "resnet50"
    config = TinyConfig()

    def sample_inputs(self, batch_size, seed=0):
        rng = np.random.default_rng(seed)
        return {"pixel_values": rng.standard_normal((batch_size, 3), dtype=np.float32)}

    def __call__(self, inputs, ops=None):
        return {"logits": inputs["pixel_values"] * 2}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "load_model", lambda name, seed=0, **kw: TinyModel())
    reference.generate(["resnet50"], tmp_path, log=lambda *_: None)
    return tmp_path


def test_generate_then_load_roundtrip(store):
    outputs = reference.load("resnet50", store, model=TinyModel())
    expected = TinyModel()(reference.evaluation_inputs(TinyModel()))
    np.testing.assert_array_equal(outputs["logits"], expected["logits"])
    manifest = json.loads((store / "manifest.json").read_text())
    entry = manifest["models"]["resnet50"]
    assert entry["samples"] == reference.evaluation_count("resnet50")
    assert entry["config"] == {"width": 3}
    assert reference.verify(["resnet50"], store, recompute=True, log=lambda *_: None) == []


def test_corrupted_file_is_named(store):
    path = store / "resnet50.npz"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(reference.ReferenceError, match=r"resnet50\.npz.*SHA-256"):
        reference.load("resnet50", store)


def test_missing_manifest_and_entry(tmp_path, store):
    with pytest.raises(reference.ReferenceError, match="manifest.*missing"):
        reference.load("resnet50", tmp_path / "nowhere")
    with pytest.raises(reference.ReferenceError, match="no reference for model 'bert-base'"):
        reference.load("bert-base", store)


def test_changed_inputs_are_detected(store):
    class Shifted(TinyModel):
        def sample_inputs(self, batch_size, seed=0):
            return {"pixel_values": super().sample_inputs(batch_size, seed)["pixel_values"] + 1}

    with pytest.raises(reference.ReferenceError, match="evaluation inputs hash"):
        reference.load("resnet50", store, model=Shifted())


def test_stale_generator_version(store, monkeypatch):
    monkeypatch.setattr(reference, "GENERATOR_VERSION", reference.GENERATOR_VERSION + 1)
    with pytest.raises(reference.ReferenceError, match="generator version"):
        reference.load("resnet50", store)


def test_unknown_model_name():
    with pytest.raises(ValueError, match=r"unknown model 'gpt5'; expected one of: albert, bert-base"):
        canonical_name("gpt5")
    with pytest.raises(ValueError, match="unknown model"):
        load_model("gpt5")


def test_atomic_write_keeps_previous_file_on_error(tmp_path):
    target = tmp_path / "report.json"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half-writ")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]
