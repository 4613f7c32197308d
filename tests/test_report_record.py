"""results.json: the schema documented in the README, validation errors, and atomic writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.hardware import get_backend
from conformance.report import record as results_record
from conformance.settings import RunSettings

SAMPLE = Path(__file__).parent / "snapshots" / "report_sample_results.json"
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def sample() -> dict:
    return json.loads(SAMPLE.read_text())


def test_sample_satisfies_schema(sample):
    assert results_record.validate(sample) is sample
    ids = [r["id"] for r in sample["records"]]
    assert len(ids) == len(set(ids)), "record ids must be unique"


def test_readme_documents_every_top_level_key(sample):
    readme = README.read_text()
    section = readme[readme.index("### results.json"):]
    for key in sample:
        assert f"`{key}`" in section, f"README's results.json schema lacks {key!r}"
    for key in sample["records"][0]:
        assert f"`{key}`" in section, f"README's results.json schema lacks record field {key!r}"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("git"), "lacks key 'git'"),
        (lambda d: d.update(schema="ipu-conformance/results/0"), "schema 'ipu-conformance/results/0'"),
        (lambda d: d.update(exit_status="0"), "exit_status is str, expected int"),
        (lambda d: d["records"][0].pop("target"), "records[0] lacks key 'target'"),
        (lambda d: d["records"][1].update(value="fast"), "records[1].value is str"),
        (lambda d: d["records"][0].update(op="=="), "records[0].op '=='"),
        (lambda d: d["tests"][0].update(outcome="flaky"), "tests[0].outcome 'flaky'"),
        (lambda d: d["settings"].pop("profile"), "settings lacks key 'profile'"),
    ],
)
def test_schema_violations_are_named(sample, mutate, message):
    mutate(sample)
    with pytest.raises(results_record.ResultsError, match=message.replace("[", r"\[").replace("]", r"\]")):
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
    assert results["verdict"] == "PASS"
    assert results["hardware"]["timing"] == "measured"
    ipu = results_record.build(settings=settings, backend=get_backend("ipu"), profile=settings.profile_data,
                               tests=[], records=[], exit_status=0)
    assert ipu["hardware"]["timing"] == "simulated"
    assert results["profile"]["samples"] == {"bert-base": 2}
    assert results["git"]["commit"] is None or len(results["git"]["commit"]) == 40
    assert results["packages"]["numpy"]
