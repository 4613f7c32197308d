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
