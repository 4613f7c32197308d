"""``ipu-conformance predict`` and ``--version``: usage errors (4), an oversized batch (1, unless --allow-overflow),
config overrides parsed by the field's type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import conformance
from conformance.cli import main, package_version
from conformance.hardware.ipu.timing import predict as predict_module
from conformance.hardware.ipu.timing.predict import shape_only_model
from conformance.hardware.ipu.timing.trace import trace_model
from models import MODEL_NAMES, load_model

BASE = ["predict", "resnet50", "--precision", "fp16"]


@pytest.mark.parametrize("value", ["0", "-1", "x", "\u0663", "1_0", "\uff12"])
def test_clients_below_one_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(BASE + ["--batch-size", "2", "--clients", value])
    assert exc.value.code == 4
    assert "--clients" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5"])
def test_batch_size_below_one_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(BASE + ["--batch-size", value])
    assert exc.value.code == 4
    assert "--batch-size: must be >= 1" in capsys.readouterr().err


def test_oversized_batch_fails_with_the_numbers_before_allocating(capsys):
    assert main(BASE + ["--batch-size", "100000"]) == 1
    err = capsys.readouterr().err
    assert "does not fit" in err and "needs 481740.8 MB" in err and "capacity 900 MB" in err and "--allow-overflow" in err


def test_allow_overflow_prints_the_estimate_saying_it_does_not_fit(capsys):
    assert main(BASE + ["--batch-size", "100000", "--allow-overflow"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "throughput:" in out
    assert main(BASE + ["--batch-size", "100000", "--allow-overflow", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sram"]["fits"] is False and data["batch_size"] == 100000


def test_a_batch_that_fits_is_unchanged(capsys):
    assert main(BASE + ["--batch-size", "4", "--clients", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sram"]["fits"] is True and data["closed_loop"]["clients"] == 1


@pytest.mark.parametrize("setting, message", [
    ("image_size=abc", "config field ResNetConfig.image_size expects an integer, got 'abc'"),
    ("image_size=1.5", "config field ResNetConfig.image_size expects an integer, got '1.5'"),
    ("downsample_in_first_stage=maybe", "config field ResNetConfig.downsample_in_first_stage expects a bool"),
    ("depths=3", "config field ResNetConfig.depths expects a JSON list of int such as [3, 4, 6, 3], got '3'"),
])
def test_set_values_are_parsed_by_the_field_type(setting, message, capsys):
    assert main(BASE + ["--batch-size", "2", "--set", setting]) == 4
    err = capsys.readouterr().err
    assert message in err and "JSON" not in err.replace("JSON list", "")


def test_set_values_that_parse(capsys):
    assert main(BASE + ["--batch-size", "2", "--set", "image_size=112", "depths=[1, 1, 1, 1]", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config_overrides"] == {"image_size": "112", "depths": "[1, 1, 1, 1]"}


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ipu-conformance {package_version()}"
    assert package_version() == conformance.__version__


def test_version_imports_no_subcommand():
    code = ("import sys; from conformance.cli import main; main(['--version']); "
            "print(sorted(m for m in sys.modules if m.startswith(('conformance.cli.', 'models', 'mlperf_loadgen'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"


def test_version_subprocess():
    done = subprocess.run([sys.executable, "-c", "import sys; from conformance.cli import main; sys.exit(main())", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("ipu-conformance ")


# Fewer layers than the models' own, so that seeded weights build in a moment: the structure per layer is the same.
SMALL = {"resnet50": {"depths": "[1, 1, 1, 1]"}, "widedeep": {}}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_timing_estimate_traces_a_shape_only_model_with_the_seeded_models_ops(name):
    """What predict prices (a model with parameters of the right shapes and no values) traces op for op, byte for byte,
    as the model with its seeded weights."""
    overrides = SMALL.get(name, {"num_hidden_layers": "2"})
    shapes_only = trace_model(shape_only_model(name, **overrides), 2, "fp8")
    seeded = trace_model(load_model(name, **overrides), 2, "fp8")
    assert shapes_only == seeded and len(seeded.ops) > 0


def test_predict_builds_no_weights(monkeypatch, capsys):
    def refused(*args, **kwargs):
        raise AssertionError("a timing estimate built seeded weights")

    for module in ("resnet50", "encoder"):
        for function in ("seeded_params", "init_params"):
            monkeypatch.setattr(f"models.{module}.{function}", refused, raising=False)
    predict_module._model.cache_clear()
    predict_module._trace.cache_clear()
    assert main(["predict", "resnet50", "--batch-size", "8", "--precision", "fp16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] > 0
