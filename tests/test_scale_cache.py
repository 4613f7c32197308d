"""The cache of calibrated FP8 input scales: a calibration is run once per machine and read back as it was made, keyed
by everything the scales are a function of; a damaged entry is calibrated again with a warning, never used."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance.datasets.cache import ScaleCache, scale_cache
from conformance.distributed.fingerprint import fingerprint
from conformance.hardware import get_backend
from conformance.hardware.ipu import fp8_scales
from conformance.hardware.ipu.fp8_scales import calibrate_inputs, calibration_inputs, check_scales
from models import load_model

REPO = Path(__file__).resolve().parents[1]
# a small wide&deep (weights built and calibrated in well under a second)
SMALL = {"bucket_sizes": (50, 40, 30), "hidden_sizes": (16, 8)}


@pytest.fixture
def model():
    return load_model("widedeep", seed=0, **SMALL)


@pytest.fixture
def settings():
    return get_backend("ipu").fp8_settings["widedeep"]


def _calibrate(model, settings, store, **options):
    return calibrate_inputs(model, settings, batch_size=64, store=store, **options)


def _no_fp32_run(monkeypatch):
    """Calibration's FP32 run fails the test from here on: what follows must read the scales from the cache."""
    def fail(*args, **kwargs):
        raise AssertionError("calibrated again: the kept scales were not read")
    monkeypatch.setattr(fp8_scales, "run_batched", fail)


def _entries(store: ScaleCache) -> list:
    return sorted(store.directory.glob("*.json"))


def test_scales_are_calibrated_once_and_read_back_as_they_were_made(model, settings, tmp_path, monkeypatch):
    fresh, info = _calibrate(model, settings, None)
    store = ScaleCache(tmp_path)
    lines: list[str] = []
    first, first_info = _calibrate(model, settings, store, say=lines.append)
    assert first == fresh and first_info == info and len(_entries(store)) == 1
    assert lines == ["widedeep: calibrating the FP8 input scales on 1024 samples in FP32 (kept in the cache for later "
                     "runs)"]
    _no_fp32_run(monkeypatch)
    again, again_info = _calibrate(model, settings, ScaleCache(tmp_path), say=lines.append)  # a later run
    assert again == fresh and again_info == info and len(lines) == 1  # nothing to announce: nothing calibrated
    assert all(type(s) is int for operands in again.values() for s in operands.values())


@pytest.mark.parametrize("change", ["skip", "method", "format", "samples", "inputs", "batch", "weight", "seed"])
def test_the_key_holds_weights_settings_inputs_and_batch(model, settings, tmp_path, change):
    store = ScaleCache(tmp_path)
    _calibrate(model, settings, store)
    options: dict = {}
    if change == "skip":
        settings = dataclasses.replace(settings, skip=("deep.mlp.0",))
    elif change == "method":
        settings = dataclasses.replace(settings, scales="mse")
    elif change == "format":
        settings = dataclasses.replace(settings, input_format="f152")
    elif change == "samples":
        options["samples"] = 512
    elif change == "inputs":
        inputs = calibration_inputs(model, 1024)
        options["inputs"] = {k: np.flip(v, axis=0).copy() for k, v in inputs.items()}
    elif change == "batch":
        options["batch_size"] = 32
    elif change == "weight":
        name = next(k for k in sorted(model.params) if model.params[k].dtype.kind == "f")
        model.params[name] = model.params[name] * np.float32(2.0)
        store = ScaleCache(tmp_path)  # a new run: the model's fingerprint is taken again
    elif change == "seed":
        model = load_model("widedeep", seed=1, **SMALL)
    calibrate_inputs(model, settings, **{"batch_size": 64, "store": store, **options})
    assert len(_entries(store)) == 2  # another entry, never the first one's scales


def test_the_key_holds_the_suites_sources(model, settings, tmp_path, monkeypatch):
    store = ScaleCache(tmp_path)
    _calibrate(model, settings, store)
    monkeypatch.setattr("conformance.datasets.cache.suite_version", lambda: "0" * 64)
    _calibrate(model, settings, store)
    assert len(_entries(store)) == 2


def test_the_key_holds_the_hosts_arithmetic(model, settings, tmp_path, monkeypatch):
    store = ScaleCache(tmp_path)
    _calibrate(model, settings, store)
    monkeypatch.setattr("conformance.datasets.cache.host_arithmetic", lambda: {"blas": {}, "numpy": "0", "numpy_simd": []})
    _calibrate(model, settings, store)
    assert len(_entries(store)) == 2


def _rewrite(path, change):
    entry = json.loads(path.read_text())
    change(entry)
    path.write_text(json.dumps(entry))


def _with_sha(change):
    """``change`` applied to the scales, the entry's SHA-256 made to match: only the check of the scales can refuse it."""
    def apply(entry):
        change(entry["scales"])
        entry["sha256"] = ScaleCache._digest(entry["scales"])
    return apply


def _first_op(scales) -> str:
    return sorted(scales)[0]


DAMAGE = {
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:40]),
    "not JSON": lambda path: path.write_bytes(b"\x00\xff not json"),
    "a list": lambda path: path.write_text("[]"),
    "oversized": lambda path: path.write_bytes(b" " * (5 << 20) + b"{}"),
    "another key": lambda path: _rewrite(path, lambda e: e["key"].update(model="albert")),
    "scales changed, hash kept": lambda path: _rewrite(
        path, lambda e: e["scales"][_first_op(e["scales"])].update(input=3)),
    "a scale out of range": lambda path: _rewrite(path, _with_sha(lambda s: s[_first_op(s)].update(input=99))),
    "a float scale": lambda path: _rewrite(path, _with_sha(lambda s: s[_first_op(s)].update(input=1.5))),
    "an unknown operand": lambda path: _rewrite(path, _with_sha(lambda s: s[_first_op(s)].update(weight=0))),
    "no operands": lambda path: _rewrite(path, _with_sha(lambda s: s.update({_first_op(s): {}}))),
    "a directory": lambda path: (path.unlink(), path.mkdir()),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_calibrated_again_with_a_warning_never_used(model, settings, tmp_path, damage):
    fresh, _ = _calibrate(model, settings, None)
    store = ScaleCache(tmp_path)
    _calibrate(model, settings, store)
    (path,) = _entries(store)
    DAMAGE[damage](path)
    store = ScaleCache(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again, _ = _calibrate(model, settings, store)
    said = [str(w.message) for w in caught]
    assert again == fresh and list(store.replaced) == [str(path)]
    assert re.search(r"could not be used \(.+\); widedeep's FP8 input scales are calibrated again", said[0]), said
    if damage == "a directory":  # nothing can replace it: the next run calibrates again
        assert len(said) == 2 and "could not be cached" in said[1] and path.is_dir()
    else:
        assert len(said) == 1 and json.loads(path.read_text())["scales"] == fresh  # replaced by a good entry


def test_kept_scales_of_an_op_on_the_skip_list_are_never_used(model, settings, tmp_path):
    """The check that refuses an entry sees the settings it is read for: an op the skip list keeps out of FP8 has no
    input scale."""
    store = ScaleCache(tmp_path)
    what = {"settings": "any", "inputs": "any"}
    store.save(model, what, {"wide.linear": {"input": 0}})
    strict = dataclasses.replace(settings, skip=("wide.linear",))
    with pytest.warns(UserWarning, match="'wide.linear' is an op of the skip list"):
        assert store.load(model, what, lambda scales: check_scales(scales, strict)) is None
    assert store.load(model, what, lambda scales: check_scales(scales, settings)) == {"wide.linear": {"input": 0}}


def test_check_scales_names_what_is_wrong(settings):
    with pytest.raises(ValueError, match=r"'deep.fc0' input: 40, expected an integer in \[-32, 31\]"):
        check_scales({"deep.fc0": {"input": 40}}, settings)
    with pytest.raises(ValueError, match="expected operands among input, a, b"):
        check_scales({"deep.fc0": {"weight": 1}}, settings)
    with pytest.raises(ValueError, match="expected an object of ops"):
        check_scales([1], settings)
    assert check_scales({"m": {"a": -32, "b": 31}}, settings) == {"m": {"a": -32, "b": 31}}


def test_a_directory_that_cannot_be_written_calibrates_without_the_cache(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.warns(UserWarning, match="is not a directory; FP8 input scales are calibrated in every run"):
        assert scale_cache(blocked) is None


def test_an_entry_that_cannot_be_written_costs_only_time(model, settings, tmp_path):
    store = ScaleCache(tmp_path)
    store.directory.parent.mkdir(parents=True, exist_ok=True)
    store.directory.write_text("")  # a file where the entries' folder goes
    with pytest.warns(UserWarning, match="could not be cached at .+; they are calibrated again in the next run"):
        scales, _ = _calibrate(model, settings, store)
    assert scales == _calibrate(model, settings, None)[0]


def test_a_run_of_the_suite_keeps_the_scales_and_reads_them_back(pytester, tmp_path):
    """The plugin gives the run's backend the cache of its cache directory: a second run announces no calibration
    and gives the first run's records."""
    def run(name):
        result = pytester.runpytest(str(REPO / "conformance"), "--hardware", "ipu", "--profile", "smoke", "--model",
                                    "widedeep", "--precision", "fp8", "-k", "test_accuracy", "--cache-dir",
                                    str(tmp_path / "cache"), "--report-dir", str(tmp_path / name))
        assert result.ret == 0, result.stdout.str()[-2000:]
        records = json.loads((tmp_path / name / "results.json").read_text())["records"]
        return result.stdout.str(), {r["id"]: (r["value"], r["passed"], r["details"]["fp8_calibration"])
                                     for r in records}

    first_output, first = run("first")
    second_output, second = run("second")
    assert "widedeep: calibrating the FP8 input scales on 1024 samples in FP32" in first_output
    assert "calibrating the FP8 input scales" not in second_output
    assert first == second and first
    assert len(list((tmp_path / "cache" / "fp8-scales").glob("widedeep-*.json"))) == 1


def test_a_model_that_cannot_be_fingerprinted_is_calibrated_without_the_cache(model, settings, tmp_path):
    model.lock = threading.Lock()  # what a fingerprint cannot see into
    store = ScaleCache(tmp_path)
    scales, _ = _calibrate(model, settings, store)
    assert scales == _calibrate(model, settings, None)[0] and not store.directory.exists()


def test_a_models_key_does_not_change_as_it_computes(tmp_path):
    """What a model caches as it computes (conformer's relative position tables, parameters' copies on a device) is
    not what defines it: a calibration after a forward reads the scales one before it kept."""
    conformer = load_model("conformer")
    settings = get_backend("ipu").fp8_settings["conformer"]
    _calibrate(conformer, settings, ScaleCache(tmp_path))  # its forward makes the tables
    assert conformer.__dict__.get("_position_tables")
    again = load_model("conformer")
    assert fingerprint(again) == fingerprint(conformer)
    _calibrate(again, settings, ScaleCache(tmp_path))
    assert len(_entries(ScaleCache(tmp_path))) == 1
    copy = pickle.loads(pickle.dumps(conformer))  # a worker's copy makes its own tables
    assert "_position_tables" not in vars(copy) and copy.position_table(8).shape == conformer.position_table(8).shape
