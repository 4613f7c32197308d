"""``--array``: the main job with the emulator on torch (CPU) gives the numpy run's decisions and verdicts.

The roundings are bit-exact on every library (tests/test_numerics_formats.py); what may differ is the order of FP32
sums inside a matmul or conv (numpy's BLAS against torch's kernels). So the records agree in every decision (passed,
outcome, established), verdict and target, and the figures agree closely, with two exceptions stated here:

* ``rounding_bias`` (the mean signed error of the FP16 results, in units of their spacing) follows the last bits of
  the FP32 sums at float partials (fp16): a different FP32 summation order moves it, within its gate;
* the host's timings (``run_s``, ``calibration_s``, ``op_checks_s``) and ``details.array`` itself.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.numerics import arrays

REPO = Path(__file__).resolve().parents[1]
HOST_FACTS = ("calibration_s", "run_s", "op_checks_s", "engine", "array")
ORDER_SENSITIVE = ("rounding_bias",)  # follows the FP32 summation order at float partials
DECISIONS = ("passed", "outcome", "established", "gating", "target", "op", "units")


def _main_job(tmp_path: Path, models: str, array: str) -> dict:
    """The accuracy tests of ``models`` at fp16 and fp8, ipu smoke, 4 samples."""
    report = tmp_path / array.replace(":", "-")
    command = [sys.executable, "-m", "pytest", "conformance/", "-k", "test_accuracy", "--hardware", "ipu", "--profile",
               "smoke", "--model", models, "--precision", "fp16,fp8", "--samples", "4", "--array", array,
               "--report-dir", str(report), "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((report / "results.json").read_text())


@pytest.mark.parametrize("models", [
    "widedeep",  # matmuls: float partials (fp16) and FP8 half partials
    pytest.param("resnet50,widedeep", marks=pytest.mark.slow),  # and convolutions (4 min on the 2-core CI host)
])
def test_torch_cpu_gives_the_numpy_runs_decisions_and_verdicts(tmp_path, models):
    try:
        arrays.load("torch:cpu")
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))
    numpy_run, torch_run = _main_job(tmp_path, models, "numpy"), _main_job(tmp_path, models, "torch:cpu")
    assert (numpy_run["settings"]["array"], torch_run["settings"]["array"]) == ("numpy", "torch:cpu")
    assert numpy_run["verdict"] == torch_run["verdict"] and numpy_run["exit_status"] == torch_run["exit_status"]
    assert [t["outcome"] for t in numpy_run["tests"]] == [t["outcome"] for t in torch_run["tests"]]
    expected = {r["id"]: r for r in numpy_run["records"]}
    got = {r["id"]: r for r in torch_run["records"]}
    assert expected and sorted(expected) == sorted(got)
    for key, record in expected.items():
        other = got[key]
        assert (record["details"]["array"], other["details"]["array"]) == ("numpy", "torch:cpu"), key
        assert {f: record[f] for f in DECISIONS} == {f: other[f] for f in DECISIONS}, key
        if record["check"] not in ORDER_SENSITIVE and record["value"] is not None:
            assert math.isclose(record["value"], other["value"], rel_tol=1e-2, abs_tol=1e-6), (key, record["value"],
                                                                                               other["value"])
        if record["precision"] == "fp8":  # half partials: the same blocks, FP16 roundings bit for bit
            assert record["value"] == other["value"], key
        details = {k: v for k, v in record["details"].items() if k not in HOST_FACTS}
        other_details = {k: v for k, v in other["details"].items() if k not in HOST_FACTS}
        assert sorted(details) == sorted(other_details), key


@pytest.mark.parametrize("spec, expected", [("numpy", "numpy"), ("torch", "torch:cpu"), ("torch:cpu", "torch:cpu"),
                                            ("torch:cuda", "torch:cuda"), ("torch:cuda:1", "torch:cuda:1")])
def test_a_library_is_named_name_colon_device(spec, expected):
    assert arrays.parse(spec).spec == expected


@pytest.mark.parametrize("spec, says", [
    ("cupy", "unknown array library 'cupy'"), ("", "unknown array library ''"), ("torch:gpu", "unknown torch device"),
    ("torch:cuda:x", "unknown torch device 'cuda:x'"), ("numpy:cpu", "numpy runs on the host only"),
])
def test_a_bad_library_name_says_what_is_expected(spec, says):
    with pytest.raises(arrays.ArrayLibraryError, match=says):
        arrays.parse(spec)


def test_the_choice_holds_in_a_block_and_is_restored():
    pytest.importorskip("torch")
    import numpy as np

    from conformance.numerics import matmul, quantize

    assert arrays.active().spec == "numpy"
    with arrays.use("torch:cpu") as library:
        assert arrays.active() is library
        with arrays.use("numpy"):
            assert arrays.active().is_numpy
        assert arrays.active() is library
        x = np.linspace(-300, 300, 1001, dtype=np.float32)
        y = quantize(x, "f143", scale=1)
        product = matmul(y[None, :16], y[:16, None], operand_format="f143")
        assert isinstance(y, np.ndarray) and isinstance(product, np.ndarray)  # numpy in, numpy out
    assert arrays.active().spec == "numpy"
    assert np.array_equal(quantize(x, "f143", scale=1), y)
    assert np.array_equal(matmul(y[None, :16], y[:16, None], operand_format="f143"), product)
