"""results.json: the schema (documented in docs/reports.md, see tests/test_docs.py), validation errors, and atomic writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.hardware import get_backend
from conformance.report import record as results_record
from conformance.settings import RunSettings
from tests.sample_results import sample_results


@pytest.fixture
def sample() -> dict:
    return sample_results()


def test_sample_satisfies_schema(sample):
    assert results_record.validate(sample) is sample
    ids = [r["id"] for r in sample["records"]]
    assert len(ids) == len(set(ids)), "record ids must be unique"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("git"), "x.json: git: missing"),
        (lambda d: d.update(schema="ipu-conformance/results/0"), "schema 'ipu-conformance/results/0'"),
        (lambda d: d.update(exit_status="0"), "x.json: exit_status: Input should be a valid integer (found '0')"),
        (lambda d: d["records"][0].pop("target"), "x.json: records[0].target: missing"),
        (lambda d: d["records"][1].update(value="fast"), "x.json: records[1].value: Input should be a valid integer"),
        (lambda d: d["records"][1].update(value=True), "records[1].value: "),
        (lambda d: d["records"][0].update(op="=="), "records[0].op: Input should be '>=' or '<=' (found '==')"),
        (lambda d: d["records"][0].update(established="yes"), "records[0].established: Input should be a valid boolean"),
        (lambda d: d["tests"][0].update(outcome="flaky"), "tests[0].outcome: Input should be 'passed'"),
        (lambda d: d["settings"].pop("profile"), "settings.profile: missing"),
        (lambda d: d.update(notes="x"), "x.json: notes: not a key of the schema"),
        (lambda d: d["plots"]["files"]["bert-base-fp8"].append("/tmp/out/plots/a.png"),
         "plots.files.bert-base-fp8[2]: expected a path relative to the report directory"),
        (lambda d: d["plots"]["files"]["bert-base-fp8"].append("../other/plots/a.png"),
         "plots.files.bert-base-fp8[2]: expected a path relative to the report directory"),
    ],
)
def test_schema_violations_are_named(sample, mutate, message):
    mutate(sample)
    with pytest.raises(results_record.ResultsError, match=re.escape(message)):
        results_record.validate(sample, source="x.json")


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(results_record.ResultsError, match="no such file"):
        results_record.load(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": ')
    with pytest.raises(results_record.ResultsError, match=r"broken.json: not valid JSON"):
        results_record.load(broken)


def test_nan_and_numpy_values_are_written_as_json(sample, tmp_path):
    import numpy as np

    sample["records"][0]["value"] = float("nan")
    sample["records"][1]["value"] = np.float32(0.5)
    sample["records"][1]["details"] = {"per_sample": np.arange(3)}
    path = tmp_path / "results.json"
    results_record.write(path, sample)
    back = results_record.load(path)
    assert back["records"][0]["value"] is None
    assert back["records"][1]["value"] == 0.5 and back["records"][1]["details"]["per_sample"] == [0, 1, 2]


def test_failure_mid_write_leaves_previous_report(sample, tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    results_record.write(path, sample)
    before = path.read_bytes()

    def half_write_then_die(self, text, *args, **kwargs):
        with open(self, "w") as fh:
            fh.write(text[: len(text) // 2])
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(Path, "write_text", half_write_then_die)
    sample["verdict"] = "PASS"
    with pytest.raises(KeyboardInterrupt):
        results_record.write(path, sample)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"], "the temporary file is cleaned up"


def test_process_killed_mid_write_leaves_previous_report(sample, tmp_path):
    """A process that dies without cleanup (like SIGKILL) between writing and renaming: the old file stays whole."""
    path = tmp_path / "results.json"
    results_record.write(path, sample)
    before = path.read_bytes()
    script = (
        "import os, sys\n"
        "from conformance.fileio import atomic_path\n"
        "with atomic_path(sys.argv[1]) as tmp:\n"
        "    tmp.write_text('{\"schema\": \"ipu-conf')\n"
        "    os._exit(9)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 9
    assert path.read_bytes() == before
    results_record.load(path)


def test_build_fills_every_key(tmp_path):
    settings = RunSettings(hardware="cpu", models=("bert-base",), profile="smoke", precisions=("fp32",), report_dir=tmp_path)
    results = results_record.build(settings=settings, backend=get_backend("cpu"), profile=settings.profile_data,
                                   tests=[], records=[], exit_status=0)
    results_record.validate(results)
    assert (results["verdict"], results["exit_status"]) == ("NO VERDICT", 5), "no gated check: nothing was judged"
    assert results["hardware"]["timing"] == "measured"
    assert results["settings"]["precisions"] == ["fp32"] and results["settings"]["device"] is None
    test = {"id": "t.py::test_a", "outcome": "passed", "duration_s": 0.1, "message": "", "xfail": None}
    record = {"id": "accuracy/bert-base/fp32/-/snr_db", "test_id": test["id"], "kind": "accuracy", "model": "bert-base",
              "precision": "fp32", "scenario": None, "check": "snr_db", "value": 30.0, "target": 20.0, "op": ">=",
              "passed": True, "units": "dB", "gating": True, "details": {}, "outcome": "passed"}
    passing = results_record.build(settings=settings, backend=get_backend("cpu"), profile=settings.profile_data,
                                   tests=[test], records=[record], exit_status=0)
    assert (passing["verdict"], passing["exit_status"]) == ("PASS", 0)
    failing = results_record.build(settings=settings, backend=get_backend("cpu"), profile=settings.profile_data,
                                   tests=[test], records=[{**record, "value": 10.0, "passed": False}], exit_status=0)
    assert (failing["verdict"], failing["exit_status"]) == ("FAIL", 1), "a failed gate fails the run, its test or not"
    ipu = results_record.build(settings=settings, backend=get_backend("ipu"), profile=settings.profile_data,
                               tests=[], records=[], exit_status=0)
    assert ipu["hardware"]["timing"] == "simulated" and ipu["settings"]["device"] == "c600"
    assert results["profile"]["samples"] == {"bert-base": 2}
    assert results["git"]["commit"] is None or len(results["git"]["commit"]) == 40
    assert results["packages"]["numpy"]


SCHEMA_FILE = Path(results_record.__file__).with_name("results.schema.json")


def test_published_schema_is_generated_from_the_model():
    """conformance/report/results.schema.json is what the pydantic model gives (regenerate: UPDATE_SNAPSHOTS=1)."""
    import os

    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SCHEMA_FILE.write_text(results_record.schema_json())
    assert SCHEMA_FILE.read_text() == results_record.schema_json(), \
        f"{SCHEMA_FILE} is out of date; rerun with UPDATE_SNAPSHOTS=1 and review"


def test_published_schema_agrees_with_the_validator(sample):
    """Any JSON Schema validator reading the published file accepts what validate() accepts and refuses the rest."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    assert not list(validator.iter_errors(sample))
    sample["records"][0]["value"] = "fast"
    sample["plots"]["files"]["bert-base-fp8"][0] = "/abs/plots/x.png"
    assert {tuple(e.absolute_path) for e in validator.iter_errors(sample)} == {
        ("records", 0, "value"), ("plots", "files", "bert-base-fp8", 0)}
