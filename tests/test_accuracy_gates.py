"""The accuracy gates can fail: broken numerics fail the gates they should, bad targets data is an error naming the
line, non-finite outputs are a failed gate (never a crash), and the test matrix comes from the targets file."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.hardware import get_backend
from conformance.hardware.ipu.ops import IpuOps
from conformance.targets import accuracy as accuracy_targets
from conformance.targets.bounds import MIN_RATIO
from models import load_model, run_batched
from models.seeds import EVAL_SEED

REPO = Path(__file__).resolve().parents[1]
SMALL_BERT = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256, seq_len=128)
SAMPLES = 8


@pytest.fixture(scope="module")
def small_bert():
    model = load_model("bert-base", **SMALL_BERT)
    inputs = model.sample_inputs(SAMPLES, seed=EVAL_SEED)
    return model, inputs, run_batched(model, inputs, SAMPLES)


def _metrics(model, inputs, ref, ops):
    return compute_metrics("bert-base", ref, run_batched(model, inputs, SAMPLES, ops), inputs)


def _verdicts(evaluations) -> dict[str, bool]:
    return {e.gate.check: e.passed for e in evaluations if e.gate.gating}


@pytest.fixture(scope="module")
def fp8_setup(small_bert):
    model, inputs, ref = small_bert
    backend = get_backend("ipu")
    plan = backend.fp8_plan(model, "fp8", batch_size=SAMPLES, calibration_samples=4)
    sets = {"fp32": compute_metrics("bert-base", ref, ref, inputs),
            "fp16": _metrics(model, inputs, ref, backend.prepare(model, "fp16").ops())}
    return backend, plan, sets


def test_correct_fp8_passes_the_tensor_gates(small_bert, fp8_setup):
    model, inputs, ref = small_bert
    backend, plan, sets = fp8_setup
    current = _metrics(model, inputs, ref, IpuOps(backend.policy("fp8"), fp8_plan=plan))
    verdicts = _verdicts(evaluate(accuracy_targets.gates_for("ipu", "bert-base", "fp8"), current, sets))
    assert verdicts["snr_db"] and verdicts["cosine"], verdicts


# The seeded QA head is fitted to planted answers (trained-like), so its spans survive moderate damage: the tensor
# floors are what catch a wrong scale first, and the task gates fail once the damage reaches the spans.
@pytest.mark.parametrize("shift, must_fail", [
    (-5, ("snr_db", "cosine")),  # scales 2^5 too small: activations saturate at 240 * 2^s
    (16, ("snr_db", "cosine")),  # 2^16 too large: most activations flush to zero
    (20, ("snr_db", "cosine", "f1@0.99xfp32", "exact_match@0.99xfp32")),  # far too large: everything flushes to zero
])
def test_wrong_fp8_scale_fails_the_fp8_gates(small_bert, fp8_setup, shift, must_fail):
    model, inputs, ref = small_bert
    backend, plan, sets = fp8_setup
    wrong = dataclasses.replace(plan, input_scales={
        op: {k: int(np.clip(s + shift, -32, 31)) for k, s in scales.items()} for op, scales in plan.input_scales.items()})
    current = _metrics(model, inputs, ref, IpuOps(backend.policy("fp8"), fp8_plan=wrong))
    evaluations = evaluate(accuracy_targets.gates_for("ipu", "bert-base", "fp8"), current, sets)
    verdicts = _verdicts(evaluations)
    assert not any(verdicts[check] for check in must_fail), verdicts


class _NanHead(IpuOps):
    """A broken device whose QA head returns NaN for three tokens of the first sample."""

    def linear(self, x, weight, bias=None, *, name):
        y = super().linear(x, weight, bias, name=name)
        if name == "qa_outputs":
            y = y.copy()
            y[0, :3, 0] = np.nan
        return y


def test_nan_in_an_output_is_a_failed_gate_naming_count_and_output(small_bert):
    model, inputs, ref = small_bert
    backend = get_backend("ipu")
    current = _metrics(model, inputs, ref, _NanHead(backend.policy("fp16")))
    assert current.nonfinite == {"start_logits": 3}
    evaluations = evaluate(accuracy_targets.gates_for("ipu", "bert-base", "fp16"), current, {"fp32": current})
    assert evaluations and not any(e.passed for e in evaluations)
    assert all("3 in output 'start_logits'" in e.describe() for e in evaluations)


# -- the targets data ----------------------------------------------------------------------------------------------
def test_shipped_targets_cover_every_model_and_precision_of_ipu():
    from models import MODEL_NAMES

    backend = get_backend("ipu")
    pairs = set(accuracy_targets.matrix("ipu", MODEL_NAMES))
    assert pairs == {(m, p) for m in MODEL_NAMES for p in backend.precisions}
    # the measured exceptions (docs/accuracy.md, "resnet50 at FP8", "albert at the release profile"): resnet50's top-1
    # and albert's answers at FP8 gate at 0.96, 0.99 reported
    proxy = {("resnet50", p, m) for p in ("fp8", "fp8-weights") for m in ("top1_agreement", "top1_accuracy")}
    proxy |= {("albert", p, m) for p in ("fp8", "fp8-weights")
              for m in ("exact_match", "f1", "squad_exact_match", "squad_f1")}
    for gate in accuracy_targets.load_targets():
        if gate.hardware == "ipu" and gate.of is not None:  # MLPerf's tiers at every precision, FP8 included
            if gate.gating:
                expected = 0.96 if (gate.model, gate.precision, gate.metric) in proxy else 0.99
                assert (gate.of, gate.ratio) == ("fp32", expected), gate
            elif (gate.model, gate.precision, gate.metric) in proxy and gate.of == "fp32":  # MLPerf's 99%, reported
                assert gate.ratio == 0.99, gate
            else:  # the 99.9% tier, and Graphcore's FP8 bar relative to FP16, reported
                assert (gate.of, gate.ratio) in {("fp32", 0.999), ("fp16", 0.998)}, gate
                assert gate.ratio == 0.999 or gate.precision.startswith("fp8"), gate


@pytest.mark.parametrize("text, message", [
    ('[ipu.bert-base.fp16]\nf1 = { of = "fp32", ratio = 0.99 }\n\n[ipu.bret.fp16]\nf1 = { min = 1 }\n',
     r"x.toml:4: unknown model 'bret'"),
    ('[ipu.bert-base.fp16]\nf1 = { of = "fp32", ratio = 0.99 }\nf2 = { min = 1 }\n', r"x.toml:3: unknown metric 'f2'"),
    ('[ipu.bert-base.fp16]\n\nf1 = { of = "fp32" }\n', r"x.toml:3: f1 has no threshold"),
    ('[ipu.bert-base.fp17]\nf1 = { min = 1 }\n', r"x.toml:1: unknown precision 'fp17'.*fp16, fp16-half-partials"),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp16", ratio = "high" }\n', r"x.toml:2: f1.ratio = 'high' is not a number"),
    ('[ipu.bert-base.fp8]\nf1 = { min = 1, tier = 0.9 }\n', r"x.toml:2: f1.tier only goes with a ratio"),
    ('[tpu.bert-base.fp8]\nf1 = { min = 1 }\n', r"x.toml:1: unknown hardware 'tpu'"),
    ('[ipu.bert-base.fp8]\nsnr_db = { min = -1000.0 }\n', r"x.toml:2: snr_db.min = -1000.0 is outside \(0, 300\]"),
    ('[ipu.bert-base.fp8]\ncosine = { min = -5 }\n', r"x.toml:2: cosine.min = -5 is outside \(-1, 1\]"),
    ('[ipu.bert-base.fp8]\ncosine = { max = 0.9 }\n', r"x.toml:2: cosine takes a min bound"),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp32", ratio = 1.2 }\n',
     re.escape(f"x.toml:2: f1.ratio = 1.2 is outside [{MIN_RATIO:g}, 1]")),
    (f'[ipu.bert-base.fp8]\nf1 = {{ of = "fp32", ratio = {MIN_RATIO / 2!r} }}\n',
     re.escape(f"x.toml:2: f1.ratio = {MIN_RATIO / 2!r} is outside [{MIN_RATIO:g}, 1]")),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp32", ratio = 0.99, tier = 0 }\n', r"x.toml:2: f1.tier = 0 is outside"),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp32", ratio = true }\n', r"x.toml:2: f1.ratio = True is not a number"),
    ('[ipu.bert-base.fp8]\nf1 = { min = nan }\n', r"x.toml:2: f1.min = nan is not a number"),
    ('[ipu.bert-base.fp8]\nf1 = { min = 0 }\n', r"x.toml:2: f1.min = 0: a task metric's bound must lie in \(0, 1\]"),
    ('[ipu.bert-base.fp8]\nsnr_db = { of = "fp32", ratio = 0.9 }\n', r"x.toml:2: snr_db is a tensor metric"),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp32", ratio = 0.99, report = { of = "fp16" } }\n',
     r"x.toml:2: f1.report must be an inline table"),
    ('[ipu.bert-base.fp8]\nf1 = { of = "fp32", ratio = 0.99, report = { of = "fp8", ratio = 0.9 } }\n',
     r"x.toml:2: f1.report.of = 'fp8'; expected one of"),
])
def test_targets_mistakes_name_the_line(text, message):
    with pytest.raises(accuracy_targets.TargetsError, match=message):
        accuracy_targets.parse_targets(text, "x.toml")


def test_report_key_adds_an_informational_gate_against_another_precision():
    gates = accuracy_targets.parse_targets('[ipu.bert-base.fp8]\n'
                                           'f1 = { of = "fp32", ratio = 0.99, tier = 0.999, report = { of = "fp16", ratio = 0.998 } }\n')
    assert [(g.of, g.ratio, g.gating) for g in gates] == [("fp32", 0.99, True), ("fp32", 0.999, False),
                                                          ("fp16", 0.998, False)]
    assert accuracy_targets.reference_precisions(gates) == {"fp16"}


def test_ratio_gate_target_is_ratio_times_the_reference_metric():
    (gate, tier) = accuracy_targets.parse_targets('[ipu.bert-base.fp16]\nf1 = { of = "fp32", ratio = 0.99, tier = 0.999 }\n')
    assert gate.gating and not tier.gating
    assert gate.target(0.5) == pytest.approx(0.495)
    assert tier.target(0.5) == pytest.approx(0.4995)


# -- the test matrix, from the data ----------------------------------------------------------------------------------
@pytest.fixture
def run(pytester):
    def run(*args):
        return pytester.runpytest_subprocess("--rootdir", str(REPO), *args)

    return run


def test_matrix_ids_and_precision_selection(run):
    result = run(str(REPO / "conformance" / "test_accuracy.py"), "--collect-only", "-q", "--hardware", "ipu",
                 "--model", "bert-base,resnet50", "--precision", "fp8,fp16")
    out = result.stdout.str()
    for case in ("bert-base-fp16", "bert-base-fp8", "resnet50-fp16", "resnet50-fp8"):
        assert f"test_accuracy[{case}]" in out
    collected = [line for line in out.splitlines() if "::test_accuracy[" in line]
    assert not any("fp8-weights" in line or "half-partials" in line for line in collected), collected


def test_unknown_precision_is_a_usage_error_listing_the_valid_ones(run):
    result = run("--hardware", "ipu", "--precision", "fp4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "unknown precision(s) 'fp4'" in err
    for name in get_backend("ipu").precisions:
        assert name in err


@pytest.mark.parametrize("owner_kind, body, says", [
    ("hardware", '[ipu.bert-base.fp16]\nsnr_db = { min = 30.0 }\n',
     "the 'cpu' backend's targets may only hold [cpu.*] tables, not ['ipu']"),
    ("model", '[ipu.albert.fp16]\nsnr_db = { min = 30.0 }\n',
     "model 'bert-base''s gates may only hold [<hardware>.bert-base.*] tables, not those of ['albert']"),
])
def test_tables_shipped_beside_the_suite_hold_only_their_owners(tmp_path, monkeypatch, owner_kind, body, says):
    """A backend's or a model's own accuracy.toml that holds another hardware's or model's tables is refused, naming
    the file and what it may hold."""
    extra = tmp_path / "accuracy.toml"
    extra.write_text(body)
    owner = "cpu" if owner_kind == "hardware" else "bert-base"
    monkeypatch.setattr(accuracy_targets, "backend_files",
                        lambda name: [(owner, extra)] if owner_kind == "hardware" else [])
    monkeypatch.setattr(accuracy_targets, "model_files", lambda name: [(owner, extra)] if owner_kind == "model" else [])
    accuracy_targets._load_targets.cache_clear()
    try:
        with pytest.raises(accuracy_targets.TargetsError) as caught:
            accuracy_targets.load_targets()
    finally:
        accuracy_targets._load_targets.cache_clear()
    assert str(extra) in str(caught.value) and says in str(caught.value), str(caught.value)
