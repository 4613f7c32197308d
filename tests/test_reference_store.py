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


def test_a_forged_reference_with_its_hashes_rewritten_is_refused(tmp_path, monkeypatch):
    """A copy of the suite's references with widedeep's outputs changed and every hash that describes them rewritten
    (the manifest's file and outputs SHA-256): it reads as a consistent set, but not as the files the suite ships."""
    import hashlib
    from pathlib import Path

    shipped = Path(reference.REFERENCE_DIR)
    copy = tmp_path / "reference"
    copy.mkdir()
    for path in shipped.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(reference, "REFERENCE_DIR", copy)
    reference.check_files(["widedeep", "albert"])  # the faithful copy is the suite's own

    with np.load(copy / "widedeep.npz") as data:
        arrays = {k: data[k] for k in data.files}
    outputs = {k: v * np.float32(1.01) for k, v in arrays.items() if not k.startswith("__")}
    np.savez_compressed(copy / "widedeep.npz", **{**arrays, **outputs})
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = manifest["models"]["widedeep"]
    entry["file_sha256"] = hashlib.sha256((copy / "widedeep.npz").read_bytes()).hexdigest()
    entry["outputs_sha256"] = reference.sha256_arrays(outputs)
    (copy / "manifest.json").write_text(json.dumps(manifest))

    other = tmp_path / "elsewhere"  # the same files as a directory of one's own: consistent, read
    other.mkdir()
    for path in copy.iterdir():
        (other / path.name).write_bytes(path.read_bytes())
    np.testing.assert_array_equal(reference.load("widedeep", other)[next(iter(outputs))], next(iter(outputs.values())))
    for check in (lambda: reference.check_files(["widedeep"]), lambda: reference.load("widedeep")):
        with pytest.raises(reference.ReferenceError, match=r"widedeep\.npz' has SHA-256 [0-9a-f]{16}\.\.\., but the "
                           r"suite's own record of the references it ships \(reference_sha256\.json\) records "
                           r"[0-9a-f]{16}\.\.\.: it is not the reference this suite ships"):
            check()
