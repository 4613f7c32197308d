"""The numeric faults of the ipu emulator do what they say (checked against independent computations: numpy's float16
and ml_dtypes' FP8 casts), put everything back on exit, and the sensitivity study finds the gates that catch them; the
``ipu-conformance sensitivity`` command checks its arguments and maps the study to its exit status and report."""

from __future__ import annotations

import json
import threading

import ml_dtypes
import numpy as np
import pytest

from conformance import numerics
from conformance.accuracy import sensitivity
from conformance.cli import main
from conformance.cli import sensitivity as sensitivity_cli
from conformance.hardware import get_backend
from conformance.hardware.ipu import backend as ipu_backend
from conformance.hardware.ipu import faults
from conformance.hardware.ipu import ops as ipu_ops
from conformance.hardware.ipu.backend import IpuBackend
from conformance.hardware.ipu.ops import Fp8Plan, IpuOps
from conformance.hardware.ipu.policy import PRECISIONS_FILE, Fp8Settings
from conformance.numerics import formats
from conformance.targets.accuracy import PROBE_METRICS
from models import load_model, model_spec, run_batched
from models.seeds import EVAL_SEED

FP8_DTYPES = {"f143": ml_dtypes.float8_e4m3fnuz, "f152": ml_dtypes.float8_e5m2fnuz}
RNG = np.random.default_rng(20240613)


def _between_f16_values() -> np.ndarray:
    """Every float16 value widened to float32, and once more with random bits below float16's mantissa (a value
    strictly between two float16 neighbours), plus values beyond the max and ties."""
    exact = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    exact = exact[np.isfinite(exact)]
    bits = exact.view(np.uint32) | RNG.integers(1, 1 << 13, exact.size, dtype=np.uint32)
    extra = np.array([65504.0, 65519.0, 65520.0, 70000.0, 1e30, 2.0**-25, 3 * 2.0**-26, 1 + 2.0**-11], np.float32)
    return np.concatenate([exact, bits.view(np.float32), extra, -extra, [np.nan, np.inf, -np.inf]]).astype(np.float32)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


# -- truncation ------------------------------------------------------------------------------------------------------
def test_f16_truncation_of_every_float16_neighbourhood():
    x = _between_f16_values()
    nearest = numerics.quantize(x, "f16")
    with faults.FAULTS["f16-truncation"].inject() as injection:
        truncated = numerics.quantize(x, "f16")
    # the oracle: numpy's float16 cast (round to nearest even), one float16 step toward zero where it went away
    with np.errstate(over="ignore", invalid="ignore"):
        rne = x.astype(np.float16)
        away = np.abs(rne.astype(np.float32)) > np.abs(x)
    expected = np.where(away, np.nextafter(rne, np.float16(0)), rne).astype(np.float32)
    expected = np.where(np.isinf(expected) & np.isfinite(x), np.copysign(65504.0, x), expected)  # saturation
    np.testing.assert_array_equal(_bits(truncated), _bits(expected))
    finite = np.isfinite(x)
    assert np.all(np.abs(truncated[finite]) <= np.abs(x[finite]))
    one_below = np.nextafter(nearest.astype(np.float16), np.float16(0)).astype(np.float32)
    assert np.all((truncated == nearest) | (truncated == one_below) | np.isnan(x))
    assert injection.changed == int(np.count_nonzero((truncated != x) & finite))  # the values off the grid


@pytest.mark.parametrize("fmt", ["f143", "f152"])
@pytest.mark.parametrize("scale", [0, -10, 3])
def test_fp8_truncation_against_ml_dtypes(fmt, scale):
    x = _between_f16_values() * np.float32(2.0**scale)
    info = numerics.format_info(fmt)
    with faults.FAULTS["fp8-truncation"].inject():
        truncated = numerics.quantize(x, fmt, scale=scale)
        f16 = numerics.quantize(x[:100], "f16")
    np.testing.assert_array_equal(_bits(f16), _bits(numerics.quantize(x[:100], "f16")))  # FP16 roundings untouched
    unscaled = x * np.float32(2.0**-scale)
    codes = unscaled.astype(FP8_DTYPES[fmt]).view(np.uint8)
    rne = codes.view(FP8_DTYPES[fmt]).astype(np.float32)
    with np.errstate(invalid="ignore"):
        away = np.abs(rne) > np.abs(unscaled)
    magnitude = (codes & 0x7F).astype(np.int16) - away
    stepped = np.where(magnitude > 0, (codes & 0x80) | magnitude, 0).astype(np.uint8)  # no negative zero in FP8
    expected = stepped.view(FP8_DTYPES[fmt]).astype(np.float32)
    beyond = np.isfinite(unscaled) & (np.abs(unscaled) > info.max_value)  # ml_dtypes gives NaN; the IPU saturates
    expected[beyond] = np.copysign(info.max_value, unscaled[beyond])
    expected[~np.isfinite(unscaled)] = np.nan  # FP8 has no infinity
    expected *= np.float32(2.0**scale)
    np.testing.assert_array_equal(_bits(truncated), _bits(expected))
    finite = np.isfinite(x)
    assert np.all(np.abs(truncated[finite]) <= np.abs(x[finite]))


def test_truncation_reaches_the_worker_threads(monkeypatch):
    monkeypatch.setenv("CONFORMANCE_THREADS", "2")
    x = (RNG.standard_normal(3 << 20) * 100).astype(np.float32)  # above two grains: split over two threads
    nearest = numerics.quantize(x, "f16")
    with faults.FAULTS["f16-truncation"].inject():
        truncated = numerics.quantize(x, "f16")
    expected = np.where(np.abs(nearest) > np.abs(x), np.nextafter(nearest.astype(np.float16), np.float16(0)),
                        nearest.astype(np.float16)).astype(np.float32)
    np.testing.assert_array_equal(truncated, expected)


# -- NaN on overflow --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, scale", [("f16", 0), ("f143", 0), ("f143", -4), ("f152", 2)])
def test_nan_on_overflow_is_the_nan_mode_everywhere(fmt, scale):
    top = numerics.format_info(fmt).max_value * 2.0**scale
    x = np.concatenate([RNG.uniform(-2 * top, 2 * top, 100_000), [top, -top, 1.03 * top, 1.1 * top]]).astype(np.float32)
    with faults.FAULTS["nan-on-overflow"].inject() as injection:
        faulty = numerics.quantize(x, fmt, scale=scale)
        partials = numerics.matmul(np.full((2, 64), 2048.0, np.float32), np.full((64, 3), 2.0, np.float32),
                                   partials="half")
    np.testing.assert_array_equal(_bits(faulty), _bits(numerics.quantize(x, fmt, scale=scale, overflow="nan")))
    assert np.isnan(partials).all()  # the half partials' running sum overflows FP16 too
    assert injection.changed == np.count_nonzero(np.isnan(faulty)) + partials.size
    assert not np.isnan(numerics.quantize(x, fmt, scale=scale)).any()  # saturation is back


# -- the FP8 plan and the policy --------------------------------------------------------------------------------------
def _fixed_plan(input_scale: int, weight_scale: int) -> Fp8Plan:
    return Fp8Plan(Fp8Settings(model="widedeep", scales="fixed", input_scale=input_scale, weight_scale=weight_scale))


@pytest.fixture(scope="module")
def operands():
    x = (RNG.standard_normal((8, 96)) * 3).astype(np.float32)
    w = (RNG.standard_normal((40, 96)) * 0.2).astype(np.float32)
    return x, w


@pytest.mark.parametrize("precision", ["fp8", "fp8-weights"])
def test_scale_off_by_one_is_every_scale_plus_one(operands, precision):
    x, w = operands
    policy = get_backend("ipu").policy(precision)
    # scales that saturate the largest values (F143 max 240 * 2^s): one more doubles the range and changes them
    with faults.FAULTS["fp8-scale-off-by-one"].inject() as injection:
        faulty = IpuOps(policy, fp8_plan=_fixed_plan(-6, -9)).linear(x, w, name="fc")
    shifted = IpuOps(policy, fp8_plan=_fixed_plan(-5, -8)).linear(x, w, name="fc")
    correct = IpuOps(policy, fp8_plan=_fixed_plan(-6, -9)).linear(x, w, name="fc")
    np.testing.assert_array_equal(_bits(faulty), _bits(shifted))
    assert not np.array_equal(faulty, correct)
    assert injection.changed == (2 if precision == "fp8" else 1)  # input and weight, or the weight only


def test_values_6pct_high_scales_every_fp8_operand(operands):
    x, w = operands
    policy = get_backend("ipu").policy("fp8")
    with faults.FAULTS["fp8-values-6pct-high"].inject():
        faulty = IpuOps(policy, fp8_plan=_fixed_plan(-4, -7)).linear(x, w, name="fc")
    high = np.float32(faults.VALUE_ERROR)
    xq = numerics.quantize(numerics.quantize(x, "f16"), "f143", scale=-4) * high
    wq = numerics.quantize(w, "f143", scale=-7) * high
    expected = numerics.matmul(xq, np.ascontiguousarray(wq.T), operand_format="f143")
    np.testing.assert_array_equal(_bits(faulty), _bits(expected))


def test_half_partials_where_the_policy_says_float(operands):
    x, w = operands
    backend = get_backend("ipu")
    fault = faults.FAULTS["half-partials"]
    with fault.inject() as injection:
        ops = IpuOps(backend.policy("fp16"))
        faulty = ops.linear(x * 300, w, name="fc")
    assert ops.policy.partials == "half" and injection.changed == 1
    expected = IpuOps(backend.policy("fp16-half-partials")).linear(x * 300, w, name="fc")
    np.testing.assert_array_equal(_bits(faulty), _bits(expected))
    assert not np.array_equal(faulty, IpuOps(backend.policy("fp16")).linear(x * 300, w, name="fc"))
    assert fault.applies(backend.policy("fp16")) is None
    assert "already" in fault.applies(backend.policy("fp16-half-partials"))
    assert "force half partials" in fault.applies(backend.policy("fp8"))


@pytest.fixture(scope="module")
def widedeep():
    model = load_model("widedeep")
    return model, model.sample_inputs(256, seed=EVAL_SEED)


def test_skip_ignored_quantizes_the_skip_list(widedeep, tmp_path):
    model, inputs = widedeep
    own = model_spec("widedeep").table("fp8").read_text()  # a precisions file of its own: the ipu's and wide&deep's
    assert "skip = []" in own
    path = tmp_path / "precisions.toml"
    path.write_text(PRECISIONS_FILE.read_text() + own.replace("skip = []", 'skip = ["deep.mlp.0"]'))
    backend = IpuBackend(precisions_file=path)
    fault = faults.FAULTS["fp8-skip-ignored"]
    assert fault.applies(backend.policy("fp8"), backend.fp8_settings["widedeep"]) is None
    assert "empty skip list" in fault.applies(backend.policy("fp8"), get_backend("ipu").fp8_settings["widedeep"])
    assert "no FP8 operands" in fault.applies(backend.policy("fp16"), backend.fp8_settings["widedeep"])

    def run():
        ops = backend.prepare(model, "fp8", batch_size=256).ops()
        return run_batched(model, inputs, 256, ops), ops

    clean, clean_ops = run()
    with fault.inject() as injection:
        faulty, faulty_ops = run()
    assert "deep.mlp.0" not in clean_ops.scales_used
    assert set(faulty_ops.scales_used["deep.mlp.0"]) == {"input", "weight"}
    assert injection.changed == 1  # one call of the skipped op, in FP8
    assert not np.array_equal(clean["probabilities"], faulty["probabilities"])
    again, _ = run()  # the correct plan is back (cached plans are keyed by their settings)
    np.testing.assert_array_equal(again["probabilities"], clean["probabilities"])


# -- restoring, one at a time ------------------------------------------------------------------------------------------
def _patched_state():
    return (formats._NearestRounding.__dict__["span"], IpuOps.__dict__["__init__"], IpuOps.__dict__["_fp8_operands"],
            ipu_backend.IpuBackend.__dict__["fp8_plan"], ipu_ops.numerics, numerics.active_path(),
            "__init__" in IpuOps.__dict__)


@pytest.mark.parametrize("name", faults.FAULT_NAMES)
def test_every_fault_restores_everything_also_on_error(name):
    before = _patched_state()
    with pytest.raises(KeyError, match="inside"):
        with faults.get_fault(name).inject():
            assert _patched_state() != before
            raise KeyError("inside")
    assert _patched_state() == before


def test_faults_do_not_nest_and_wait_for_each_other():
    first, second = faults.FAULTS["f16-truncation"], faults.FAULTS["half-partials"]
    entered = threading.Event()
    with first.inject():
        with pytest.raises(RuntimeError, match="do not nest"):
            with second.inject():
                pass

        def other():
            with second.inject():
                entered.set()

        thread = threading.Thread(target=other)
        thread.start()
        assert not entered.wait(0.3)  # blocked while the first fault is active
    thread.join(10)
    assert entered.is_set()


def test_unknown_fault_names_the_faults():
    with pytest.raises(ValueError, match="unknown fault 'bogus'; expected one of: fp8-scale-off-by-one"):
        faults.get_fault("bogus")


# -- the study ---------------------------------------------------------------------------------------------------------
# fp16 and fp8 exercise every fault but the skip list (wide&deep's is empty: n/a) and keep the study quick
STUDY_PRECISIONS = ("fp16", "fp8")


@pytest.fixture(scope="module")
def widedeep_study():
    return sensitivity.run(["widedeep"], STUDY_PRECISIONS, profile="smoke")


def test_widedeep_study_at_smoke(widedeep_study):
    cases = {c["precision"]: {f["fault"]: f for f in c["faults"]} for c in widedeep_study["cases"]}
    assert set(cases) == set(STUDY_PRECISIONS)
    for precision, entries in cases.items():
        assert list(entries) == list(faults.FAULT_NAMES)
        policy = get_backend("ipu").policy(precision)
        for name, entry in entries.items():
            reason = faults.FAULTS[name].applies(policy, get_backend("ipu").fp8_settings["widedeep"])
            assert (entry["status"] == "n/a") == (reason is not None), (precision, name, entry)
            assert entry["status"] in sensitivity.STATUSES
            assert entry["status"] == "caught" or entry["reason"], entry
    # the errors of the FP8 values themselves: the task metric and the tensor floors see them
    for name in ("fp8-values-6pct-high", "fp8-truncation"):
        assert cases["fp8"][name]["status"] == "caught", cases["fp8"][name]
    # truncation costs only a few dB, which the SNR floors let through: the rounding-bias probe catches it (at fp8 the
    # FP16 roundings of wide&deep's small elementwise ops are too few to show beside the FP8 error of its matrix ops)
    for precision, name in (("fp16", "f16-truncation"), ("fp8", "fp8-truncation")):
        assert "rounding_bias" in cases[precision][name]["caught_by"], cases[precision][name]
    # nothing in wide&deep overflows FP16 or FP8: its outputs under NaN on overflow are the correct ones, and only the
    # op-level checks (whose probes overflow on purpose) catch it
    # (the rounding bias is summed on the numpy path under the fault: equal to the last bits only)
    on_outputs = {c["precision"]: {e["check"]: e["value"] for e in c["baseline"] if e["metric"] not in PROBE_METRICS}
                  for c in widedeep_study["cases"]}
    for precision, entries in cases.items():
        entry = entries["nan-on-overflow"]
        assert entry["status"] == "caught" and entry["caught_by"] == ["op_mismatches"], entry
        faulty = {e["check"]: e["value"] for e in entry["evaluations"]}
        assert all(faulty[check] == value for check, value in on_outputs[precision].items())
    # the faults that move the outputs too little for any gate on them: the op-level checks catch them
    for precision, name in (("fp8", "fp8-scale-off-by-one"), ("fp16", "half-partials"), ("fp8", "f16-truncation")):
        assert "op_mismatches" in cases[precision][name]["caught_by"], cases[precision][name]
    assert widedeep_study["counts"]["not caught"] == 0 and widedeep_study["all_caught"]
    # the study's evaluation set has no labels: the label-metric gates do not apply, and the baseline passes
    for case in widedeep_study["cases"]:
        assert all((e["passed"] or not e["gating"]) and e["metric"] not in ("click_accuracy", "click_auc")
                   for e in case["baseline"]), case
    assert json.loads(json.dumps(widedeep_study)) == widedeep_study  # plain data


def test_a_fault_is_caught_only_by_gates_that_passed_without_it(widedeep_study):
    for case in widedeep_study["cases"]:
        passed = {e["check"]: e["passed"] for e in case["baseline"]}
        for entry in case["faults"]:
            verdicts = {e["check"]: e for e in entry["evaluations"]}
            for check in entry["caught_by"]:
                assert passed[check] and not verdicts[check]["passed"] and verdicts[check]["gating"]
            for check in entry["flagged_by"]:
                assert passed[check] and not verdicts[check]["passed"] and not verdicts[check]["gating"]


@pytest.mark.slow  # a minute on the 2-core CI host; the widedeep study above runs every fault in CI
def test_bert_base_fp8_catches_values_6pct_high():
    result = sensitivity.run(["bert-base"], ["fp8"], ["fp8-values-6pct-high"], "smoke")
    (case,) = result["cases"]
    (entry,) = case["faults"]
    assert entry["status"] == "caught", entry
    assert result["all_caught"]


def test_renderings_name_every_fault_and_verdict(widedeep_study):
    text = sensitivity.render_text(widedeep_study)
    markdown = sensitivity.render_markdown(widedeep_study)
    for case in widedeep_study["cases"]:
        assert f"{case['model']} {case['precision']}" in text and f"## {case['model']} {case['precision']}" in markdown
    for name in faults.FAULT_NAMES:
        assert name in text and f"`{name}`" in markdown
    assert "not triggered" in text and "n/a" in markdown


# -- the command ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt5"], "--model 'gpt5': unknown; expected one of: albert, bert-base"),
    (["--model", "widedeep,wide&deep"], "given more than once"),
    (["--model", ""], "--model '': unknown"),
    (["--precision", "fp32"], "--precision 'fp32': unknown; expected one of: fp16, fp16-half-partials, fp8"),
    (["--fault", "bitflip"], "--fault 'bitflip': unknown; expected one of: fp8-scale-off-by-one"),
    (["--profile", "huge"], "--profile 'huge': unknown; expected one of: smoke, default, full"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--model"], "expected one argument"),
])
def test_usage_errors_exit_4_naming_the_choices(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        code = main(["sensitivity", *argv])
        raise SystemExit(code)
    assert exited.value.code == 4
    assert message in capsys.readouterr().err


def test_report_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("")
    assert main(["sensitivity", "--model", "widedeep", "--report-dir", str(target)]) == 4
    assert "is not a directory" in capsys.readouterr().err


def _result(status: str) -> dict:
    entry = {"fault": "f16-truncation", "description": "d", "status": status, "caught_by": ["snr_db"] if
             status == "caught" else [], "flagged_by": [], "reason": "" if status == "caught" else "why",
             "changed": 3, "unit": "values", "evaluations": [], "seconds": 0.1}
    counts = {s: int(s == status) for s in sensitivity.STATUSES}
    return {"schema": sensitivity.SCHEMA, "hardware": "ipu", "profile": "smoke", "faults": {"f16-truncation": "d"},
            "cases": [{"model": "widedeep", "precision": "fp16", "samples": 1, "batch_size": 1, "baseline": [],
                       "baseline_seconds": 0.0, "faults": [entry]}],
            "errors": [], "counts": counts, "all_caught": status != "not caught", "seconds": 1.0}


@pytest.mark.parametrize("status, code", [("caught", 0), ("not triggered", 0), ("n/a", 0), ("not caught", 1)])
def test_exit_status_and_report_files(status, code, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sensitivity, "run", lambda *args, **kwargs: _result(status))
    report = tmp_path / "out" / "nested"
    assert main(["sensitivity", "--model", "widedeep", "--report-dir", str(report)]) == code
    out = capsys.readouterr().out
    assert ("NOT CAUGHT" in out) == (status == "not caught")
    assert json.loads((report / "sensitivity.json").read_text()) == _result(status)
    assert "| `f16-truncation` |" in (report / "sensitivity.md").read_text()
    assert sorted(p.name for p in report.iterdir()) == ["sensitivity.json", "sensitivity.md"]  # no temporary left


def test_unwritable_report_dir_exits_3(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sensitivity, "run", lambda *args, **kwargs: _result("caught"))
    (tmp_path / "file").write_text("")
    assert main(["sensitivity", "--model", "widedeep", "--report-dir", str(tmp_path / "file" / "report")]) == 3
    assert "cannot write the report into" in capsys.readouterr().err


def test_help_lists_faults_and_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["sensitivity", "--help"])
    out = capsys.readouterr().out
    joined = "".join(out.split())  # argparse wraps lines at hyphens
    assert all(name in joined for name in faults.FAULT_NAMES) and "4usageerror" in joined
    assert sensitivity_cli.EXIT_USAGE == 4


def test_a_model_without_usable_references_is_listed_and_the_others_run(monkeypatch, tmp_path, capsys):
    """Stale stored outputs of one model: the study says so, runs the rest, and gives no verdict: unusable data (4)."""
    real = sensitivity.reference.load

    def load(name, *args, **kwargs):
        if name == "conformer":
            raise sensitivity.reference.ReferenceError("reference 'conformer': stale")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sensitivity.reference, "load", load)
    code = main(["sensitivity", "--model", "conformer,widedeep", "--precision", "fp16", "--fault", "half-partials",
                 "--report-dir", str(tmp_path)])
    assert code == 4
    result = json.loads((tmp_path / "sensitivity.json").read_text())
    assert result["errors"] == [{"model": "conformer", "error": "reference 'conformer': stale"}]
    assert [c["model"] for c in result["cases"]] == ["widedeep"]
    assert "conformer: not run: reference 'conformer': stale" in capsys.readouterr().out
