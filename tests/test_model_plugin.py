"""A model outside the suite: the tiny MLP classifier of ``tests/plugins/tinymlp``, pip-installed into a directory of
its own, registers through the entry-point group ``ipu_conformance.models`` with its own gates, targets, counts and
FP8 settings, and the main job judges it at every ipu precision and on the cpu without a file of the suite changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "plugins" / "tinymlp"
NAME = "tinymlp"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("model_plugin")
    source = root / "source"
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
                    "--target", str(site), str(source)], check=True)
    return site


def _pytest(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-rs"], cwd=REPO, env=env,
                          capture_output=True, text=True)


@pytest.mark.parametrize("hardware, precisions", [
    ("ipu", ("fp16", "fp16-half-partials", "fp8", "fp8-weights")),
    ("cpu", ("fp32",)),
])
def test_the_suite_judges_the_installed_model(installed, hardware, precisions):
    result = _pytest(installed, "conformance/", "--hardware", hardware, "--model", NAME, "--profile", "smoke", "-v")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    for precision in precisions:
        assert f"test_accuracy[{NAME}-{precision}] PASSED" in out, out[-4000:]
    timed = ("fp16", "fp8") if hardware == "ipu" else ("fp32",)
    scenarios = ("SingleStream", "MultiStream", "Server", "Offline") if hardware == "ipu" else ("SingleStream", "Offline")
    for precision in timed:
        for scenario in scenarios:
            assert f"test_performance[{NAME}-{precision}-{scenario}] PASSED" in out, out[-4000:]
    assert "NOTSET" not in out
    assert f"{NAME} is a model shipped on its own: its FP32 reference is computed in the run" in out


def test_a_hardware_without_the_models_targets_refuses_it_naming_the_table(installed):
    result = _pytest(installed, "conformance/", "--hardware", "null", "--model", NAME, "--profile", "smoke",
                     "--collect-only")
    assert result.returncode == 4, (result.stdout + result.stderr)[-3000:]
    assert f"no performance targets for [targets.{NAME}.null.fp32]" in result.stdout + result.stderr


def test_the_models_names_and_tables_are_its_own(installed):
    code = ("import models; from conformance.targets import accuracy, performance, profiles;"
            "print(models.MODEL_NAMES);"
            f"print(sorted({{g.precision for g in accuracy.load_targets() if g.model == {NAME!r}}}));"
            f"print(profiles.load_profiles()['smoke'].samples[{NAME!r}]);"
            f"print(performance.load_performance_targets().models[{NAME!r}].max_batch)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(installed), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert NAME in eval(lines[0]) and "widedeep" in eval(lines[0])  # noqa: S307 - our own printed tuple
    assert eval(lines[1]) == ["fp16", "fp16-half-partials", "fp32", "fp8", "fp8-weights"]  # noqa: S307
    assert lines[2] == "64" and eval(lines[3]) == {"ipu": 64, "cpu": 16}  # noqa: S307


def test_a_models_table_naming_another_model_is_refused(installed, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(installed, site)
    tables = site / "tinymlp_model" / "tables"
    (tables / "profiles.toml").write_text((tables / "profiles.toml").read_text().replace(
        "[smoke]\nsamples = { tinymlp = 64 }", "[smoke]\nsamples = { tinymlp = 64, widedeep = 8 }"))
    result = _pytest(site, "conformance/", "--hardware", "cpu", "--model", NAME, "--collect-only")
    assert result.returncode == 4, (result.stdout + result.stderr)[-3000:]
    assert f"{tables / 'profiles.toml'}: [smoke].samples: the counts of model {NAME!r} are" in result.stdout + result.stderr


def test_untimed_precisions_are_one_skip_saying_why(installed):
    result = _pytest(installed, "conformance/test_performance.py", "--hardware", "ipu", "--model", NAME,
                     "--precision", "fp16-half-partials", "--profile", "smoke", "-v")
    out = result.stdout + result.stderr
    assert result.returncode == 5, out[-3000:]  # nothing judged: no verdict, not a pass
    assert "test_performance[untimed] SKIPPED" in out and "NOTSET" not in out
    assert "hardware 'ipu' times no model at precision fp16-half-partials: its performance targets are at fp16, fp8" in out


def test_a_computed_metric_without_a_gate_is_listed_as_informational(installed):
    # the cpu gates widedeep's FP32 run on its SNR alone; its click accuracy and AUC are computed all the same
    result = _pytest(installed, "conformance/test_accuracy.py", "--hardware", "cpu", "--model", "widedeep",
                     "--profile", "smoke")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "accuracy widedeep fp32: no gate for accuracy, auc (informational: add it to [cpu.widedeep.fp32]" in out
