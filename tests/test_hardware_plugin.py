"""A hardware backend from another distribution: registered in the entry-point group ``ipu_conformance.hardware``,
pip-installed, it becomes a ``--hardware`` choice and the real suite judges it with the targets it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.hardware import ENTRY_POINT_GROUP
from conformance.hardware.base import FP32_DATA_TYPES

REPO = Path(__file__).resolve().parents[1]
NAME = "halfmatmul"
OFFLINE_ONLY = "halfmatmul-offline"

PYPROJECT = f"""
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "halfmatmul-backend"
version = "0.1"

[project.entry-points."{ENTRY_POINT_GROUP}"]
{NAME} = "halfmatmul_backend:HalfMatmulBackend"
{OFFLINE_ONLY} = "halfmatmul_backend:OfflineOnlyBackend"

[tool.setuptools]
packages = ["halfmatmul_backend"]

[tool.setuptools.package-data]
halfmatmul_backend = ["targets/*.toml", "offline_only/*.toml"]
"""

BACKEND = f'''
"""A vendor's device whose matrix units round their results to float16; everything else is FP32."""
import time
from pathlib import Path

import numpy as np

from conformance.hardware.base import Backend, Prepared
from conformance.hardware.devices import ExecutingDevice, Samples
from models.ops import Ops


class HalfMatmulOps(Ops):
    def linear(self, x, weight, bias=None, *, name):
        return super().linear(x, weight, bias, name=name).astype(np.float16).astype(np.float32)


class HalfMatmulBackend(Backend):
    name = "{NAME}"
    description = "matrix units with float16 results"
    precisions = ("fp16",)
    targets_dir = Path(__file__).with_name("targets")

    def prepare(self, model, precision, calibration_inputs=None, *, batch_size=4, case=None):
        self.check_precision(precision)
        return Prepared(model, precision, lambda recorder=None: HalfMatmulOps(recorder=recorder))

    def loadgen_device(self, model, precision, workload):
        samples, ops = Samples(model, workload), HalfMatmulOps()
        device = PacedDevice(lambda indices: samples.responses(model(samples.batch_inputs(indices), ops), len(indices)))
        device.samples = samples
        return device


class PacedDevice(ExecutingDevice):
    """Computes each batch for real and completes it SAMPLE_S per sample after it could start, on the device's own clock
    (the host computes a sample in tens of milliseconds): its figures are the same on a busy host as on a quiet one,
    and a one-sample Offline run lasts past the smoke profile's 300 ms."""

    SAMPLE_S = 0.35

    def __init__(self, execute):
        super().__init__(execute)
        self.free_at = 0.0

    def ready_at(self):
        return self.free_at

    def start_batch(self, indices, formed_at):
        start = max(formed_at, self.free_at)  # when the batch was whole (or the device free), not when a thread woke
        responses = self.execute(indices)
        self.free_at = max(time.perf_counter(), start + self.SAMPLE_S * len(indices))
        return self.free_at, responses


class OfflineOnlyBackend(HalfMatmulBackend):
    name = "{OFFLINE_ONLY}"
    scenarios = ("Offline",)
    targets_dir = Path(__file__).with_name("offline_only")
'''

ACCURACY = f"""
[{NAME}.widedeep.fp16]
auc = {{ of = "fp32", ratio = 0.99 }}
snr_db = {{ min = 30.0 }}
"""

PERFORMANCE = f"""
[targets.widedeep.{NAME}.fp16]
Offline = 1
SingleStream = 5000

[max_batch]
widedeep = 1

[profiles.smoke]
min_query_count = {{ SingleStream = 4, MultiStream = 1, Server = 4, Offline = 1 }}
"""  # the backend runs the smoke profile only: it gives counts for that one


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The distribution, pip-installed into a directory of its own (the test's environment stays as it was)."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "source"
    (source / "halfmatmul_backend" / "targets").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "halfmatmul_backend" / "__init__.py").write_text(textwrap.dedent(BACKEND))
    (source / "halfmatmul_backend" / "targets" / "accuracy.toml").write_text(ACCURACY)
    (source / "halfmatmul_backend" / "targets" / "performance.toml").write_text(PERFORMANCE)
    (source / "halfmatmul_backend" / "offline_only").mkdir()
    (source / "halfmatmul_backend" / "offline_only" / "accuracy.toml").write_text(ACCURACY.replace(NAME, OFFLINE_ONLY))
    (source / "halfmatmul_backend" / "offline_only" / "performance.toml").write_text(PERFORMANCE.replace(NAME, OFFLINE_ONLY))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
                    "--target", str(site), str(source)], check=True)
    return site


def _pytest(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, env=env, capture_output=True, text=True)


def test_the_installed_backend_is_a_hardware_choice(installed):
    result = _pytest(installed, "--help")
    assert result.returncode == 0 and NAME in result.stdout


def test_the_suite_judges_the_installed_backend(installed, tmp_path):
    result = _pytest(installed, "conformance/", "--hardware", NAME, "--model", "widedeep", "--profile", "smoke",
                     "--report-dir", str(tmp_path), "-p", "no:randomly")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["hardware"]["name"] == NAME and results["verdict"] == "PASS"
    outcomes = {t["id"].split("::")[-1]: t["outcome"] for t in results["tests"]}
    for test in ("test_accuracy[widedeep-fp16]", "test_performance[widedeep-fp16-Offline]",
                 "test_performance[widedeep-fp16-SingleStream]", "test_audit[widedeep-fp16-Offline-TEST01]"):
        assert outcomes[test] == "passed", outcomes
    checks = {(r["kind"], r["check"]) for r in results["records"]}
    assert {("accuracy", "auc@0.99xfp32"), ("accuracy", "snr_db"), ("performance", "samples_per_second")} <= checks


def test_a_profile_the_backend_gives_no_counts_for_is_a_usage_error_naming_it(installed):
    result = _pytest(installed, "conformance/", "--hardware", NAME, "--model", "widedeep", "--profile", "default",
                     "--collect-only")
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    err = result.stderr + result.stdout
    assert f"profile 'default' has no LoadGen query counts for hardware {NAME!r}" in err
    assert "[profiles.default].min_query_count" in err


def test_mistakes_in_a_backends_targets_name_the_backends_file(tmp_path, monkeypatch):
    from conformance.targets import performance

    extra = tmp_path / "performance.toml"
    extra.write_text("[targets.widedeep.cpu.fp8]\nOffline = 1\n\n[max_batch]\nwidedeep = 1\n")
    monkeypatch.setattr(performance, "backend_files", lambda filename: [("cpu", extra)])
    performance.load_performance_targets.cache_clear()
    with pytest.raises(performance.PerformanceTargetsError, match=rf"{extra}:1: .*unknown precision 'fp8' of hardware "
                                                                  r"'cpu'"):
        performance.load_performance_targets()
    performance.load_performance_targets.cache_clear()  # the suite's own targets for the tests after this one


def test_a_target_the_backend_cannot_run_is_a_usage_error_before_any_test(installed):
    result = _pytest(installed, "conformance/", "--hardware", OFFLINE_ONLY, "--model", "widedeep", "--profile", "smoke")
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    err = result.stderr + result.stdout
    assert "widedeep-fp16-SingleStream" in err and "does not run the SingleStream scenario" in err


def test_what_the_backend_does_not_declare_has_generic_answers(tmp_path):
    """The generic parts ask every backend the same questions; a backend that declares only how it computes and how it
    is driven has no op checks, no model of its device, and precisions that the report calls by their names."""
    namespace = {"__file__": str(tmp_path / "halfmatmul_backend.py"), "__name__": "halfmatmul_backend"}
    exec(compile(textwrap.dedent(BACKEND), namespace["__file__"], "exec"), namespace)
    backend = namespace["HalfMatmulBackend"]()
    assert backend.op_checks("widedeep", "fp16", {}) is None
    assert backend.predicted_throughput("widedeep", "fp16", [1, 2], 1) is None and backend.timing_model() is None
    assert backend.data_types("fp16") == dict.fromkeys(FP32_DATA_TYPES, "fp16")
    assert backend.data_types("fp32") == FP32_DATA_TYPES
