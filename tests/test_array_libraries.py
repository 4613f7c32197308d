"""``--array``: the main job with the emulator on torch (CPU) gives the numpy run's decisions and verdicts
(conformance/report/libraries.py says what must agree and which fields may differ)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.numerics import arrays
from conformance.report.libraries import compare_libraries, noise_tolerance_db

REPO = Path(__file__).resolve().parents[1]


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
    assert {r["details"]["array"] for r in numpy_run["records"]} == {"numpy"}
    assert {r["details"]["array"] for r in torch_run["records"]} == {"torch:cpu"}
    comparison = compare_libraries(numpy_run, torch_run)
    assert comparison.records == len(numpy_run["records"]) > 0
    assert comparison.same, comparison.describe()
    assert not comparison.inexact_half_partials, comparison.describe()  # fp8: the same blocks, bit for bit


@pytest.mark.parametrize("spec, expected", [("numpy", "numpy"), ("torch", "torch:cpu"), ("torch:cpu", "torch:cpu"),
                                            ("torch:cuda", "torch:cuda"), ("torch:cuda:1", "torch:cuda:1")])
def test_a_library_is_named_name_colon_device(spec, expected):
    assert arrays.parse(spec).spec == expected


@pytest.mark.parametrize("spec, worker, devices, expected", [
    ("torch:cuda", 0, 2, "torch:cuda:0"), ("torch:cuda", 3, 2, "torch:cuda:1"), ("torch:cuda", 1, 1, "torch:cuda:0"),
    ("torch:cuda", None, 2, "torch:cuda"),  # not a local worker: the device its process sees first
    ("torch:cuda:1", 0, 2, "torch:cuda:1"), ("torch:cpu", 1, 2, "torch:cpu"), ("numpy", 1, 2, "numpy"),
    ("torch:cuda", 1, 0, "torch:cuda")])
def test_each_local_worker_computes_on_a_device_of_its_own(spec, worker, devices, expected):
    assert arrays.spread(spec, worker, devices) == expected


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


def _run(array: str, values: dict[str, float], passed: bool = True) -> dict:
    """A results.json document of one job on ``array`` with one record per (precision, check) in ``values``."""
    records = []
    for (precision, check), value in values.items():
        records.append({"id": f"accuracy/m/{precision}//{check}", "check": check, "precision": precision,
                        "value": value, "passed": passed, "outcome": "passed" if passed else "failed",
                        "established": True, "gating": True, "target": 0.99, "op": ">=", "units": 8,
                        "details": {"array": array, "run_s": 1.0, "samples": 8}})
    return {"settings": {"array": array}, "verdict": "PASS" if passed else "FAIL", "exit_status": 0 if passed else 1,
            "tests": [{"id": "test_accuracy[m]", "outcome": "passed" if passed else "failed"}], "records": records}


FIGURES = {("fp16", "snr_db"): 40.0, ("fp16", "rounding_bias"): 0.01, ("fp8", "snr_db"): 30.0}


def test_library_comparison_accepts_the_summation_orders_differences():
    other = dict(FIGURES)
    other["fp16", "snr_db"], other["fp16", "rounding_bias"] = 40.0001, -0.02  # last FP32 bits; bias follows the order
    comparison = compare_libraries(_run("numpy", FIGURES), _run("torch:cuda", other))
    assert comparison.same and comparison.records == 3 and comparison.equal_values == 1
    assert comparison.max_relative_check == "accuracy/m/fp16//snr_db" and 0 < comparison.max_relative < 1e-5
    assert not comparison.inexact_half_partials
    assert "SAME decisions and verdicts" in comparison.describe()


@pytest.mark.parametrize("change, says", [
    (lambda run: run["records"][0].update(passed=False), "accuracy/m/fp16//snr_db: passed True != False"),
    (lambda run: run["records"][0].update(established=False), "established True != False"),
    (lambda run: run["records"][0].update(value=39.0), "figures beyond the tolerance: 1"),
    (lambda run: run.update(verdict="FAIL"), "run verdict: 'PASS' != 'FAIL'"),
    (lambda run: run["tests"][0].update(outcome="failed"), "test test_accuracy[m]: passed != failed"),
    (lambda run: run["records"].pop(), "accuracy/m/fp8//snr_db: only in the reference run"),
    (lambda run: run["records"][0]["details"].update(extra=1), "details fields ['extra'] on one side only"),
])
def test_library_comparison_names_what_differs(change, says):
    other = _run("torch:cuda", FIGURES)
    change(other)
    comparison = compare_libraries(_run("numpy", FIGURES), other)
    assert not comparison.same and says in comparison.describe()


def test_library_comparison_lists_half_partials_figures_that_are_not_bit_equal():
    other = dict(FIGURES)
    other["fp8", "snr_db"] = 30.000001
    comparison = compare_libraries(_run("numpy", FIGURES), _run("torch:cuda", other))
    assert comparison.same and comparison.inexact_half_partials == ["accuracy/m/fp8//snr_db: 30.0 != 30.000001"]


def _with_values(run: dict, values: int) -> dict:
    """The run with each record's tensor metrics saying its figure was measured on ``values`` values."""
    for record in run["records"]:
        record["details"].update(worst_output="y", tensor_metrics={"y": {"values": values}})
    return run


def test_two_draws_of_the_rounding_noise_compare_within_their_spread():
    assert noise_tolerance_db(8) == pytest.approx(6.57, abs=0.01)
    assert noise_tolerance_db(512) == pytest.approx(1.59, abs=0.01)
    assert noise_tolerance_db(10**6) == pytest.approx(0.0432, abs=1e-3)
    other = dict(FIGURES)
    other["fp16", "snr_db"] = 42.5  # a few roundings of 8 values flipped by the summation order
    assert compare_libraries(_with_values(_run("numpy", FIGURES), 8), _with_values(_run("torch:cpu", other), 8)).same
    comparison = compare_libraries(_with_values(_run("numpy", FIGURES), 512), _with_values(_run("torch:cpu", other),
                                                                                           512))
    assert comparison.figures == ["accuracy/m/fp16//snr_db: 40.0 != 42.5 (2.5 dB apart; two draws of the noise of 512 "
                                  "values lie within 1.59 dB)"]
    # without the count (or with different counts) the figure is held to the plain tolerance
    assert not compare_libraries(_run("numpy", FIGURES), _run("torch:cpu", other)).same
    assert not compare_libraries(_with_values(_run("numpy", FIGURES), 8), _with_values(_run("torch:cpu", other),
                                                                                       16)).same


def test_half_partials_noise_is_not_a_draw():
    other = dict(FIGURES)
    other["fp8", "snr_db"] = 31.0
    comparison = compare_libraries(_with_values(_run("numpy", FIGURES), 8), _with_values(_run("torch:cpu", other), 8))
    assert not comparison.same and "accuracy/m/fp8//snr_db: 30.0 != 31.0" in comparison.describe()


def test_a_ratio_gates_target_follows_its_figure_within_the_tolerance():
    other = _run("torch:cuda", FIGURES)
    other["records"][0]["target"] = 0.99 * (1 + 1e-6)  # 0.998 x an FP16 figure that moved in its last FP32 bits
    assert compare_libraries(_run("numpy", FIGURES), other).same
    other["records"][0]["target"] = 0.9
    assert "target 0.99 != 0.9" in compare_libraries(_run("numpy", FIGURES), other).describe()


def test_a_device_out_of_memory_fails_the_batch_naming_the_memory(monkeypatch):
    """A batch the device has no memory for gives no figure: the error names the library, the batch and what the
    library could not allocate."""
    from conformance.accuracy import evaluation

    try:
        library = arrays.load("torch:cpu")
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))

    class OutOfMemory(RuntimeError):
        pass

    monkeypatch.setattr(arrays.ArrayLibrary, "memory_errors", property(lambda self: (OutOfMemory,)))

    class DeviceOps:
        takes_library_arrays = True

    def forward(inputs, ops):
        raise OutOfMemory("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.19 GiB")

    with arrays.use("torch:cpu"):
        with pytest.raises(arrays.DeviceMemoryError) as caught:
            evaluation._forward(forward, {"x": np.zeros((6, 4), np.float32)}, DeviceOps(), False)
    said = str(caught.value)
    assert said.startswith(f"array library {library.spec} ran out of device memory computing a batch of 6 samples")
    assert "Tried to allocate 3.00 GiB" in said and "--array numpy" in said
