"""The IPU timing model: monotone where physics says so, FP8 faster only through the matrix units, the calibration rows
fitted within the error the calibration reports, and the ``predict`` command's output and errors."""

from __future__ import annotations

import dataclasses as dc
import json

import pytest

from conformance.cli import main
from conformance.hardware.ipu.timing import fit as calibration
from conformance.hardware.ipu.timing.chips import get_device
from conformance.hardware.ipu.timing.cost import (
    TimingModel,
    calibrated_parameters,
    default_execution,
    load_calibration,
    memory_fit,
)
from conformance.hardware.ipu.timing.packing import first_fit, packing_stats
from conformance.hardware.ipu.timing.predict import JSON_KEYS, extrapolated_trace, memory_estimate, model_trace, predict
from conformance.hardware.ipu.timing.trace import OpRecord, Trace, data_types, trace_model

SMALL_BERT = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512, seq_len=64)
UNPACKED = default_execution("bert-base", packed=False)


def ms(model, batch, precision="fp16", overrides=SMALL_BERT, device="c600", execution=UNPACKED, on_chip=False):
    """Time per batch in ms; ``on_chip``: without the host's share (compute, exchange and sync only)."""
    t = predict(model, batch, precision, device, overrides=overrides, execution=execution).time
    return (t.per_batch_s - (t.host_s if on_chip else 0.0)) * 1e3


def test_time_per_batch_grows_with_batch_size():
    times = [ms("bert-base", b) for b in (1, 2, 4, 8, 16, 32, 64)]
    assert all(a < b for a, b in zip(times, times[1:])), times
    wide = [predict("widedeep", b, "fp16").time.per_batch_s for b in (256, 1024, 4096, 16384)]
    assert all(a < b for a, b in zip(wide, wide[1:])), wide


def test_time_grows_with_flops():
    base = ms("bert-base", 8)
    deeper = ms("bert-base", 8, overrides={**SMALL_BERT, "num_hidden_layers": 4})
    wider = ms("bert-base", 8, overrides={**SMALL_BERT, "intermediate_size": 2048})
    longer = ms("bert-base", 8, overrides={**SMALL_BERT, "seq_len": 256})
    assert base < deeper and base < wider and base < longer
    # twice the layers: about twice the time on the chip (the embeddings and the head are not doubled)
    ratio = ms("bert-base", 8, overrides={**SMALL_BERT, "num_hidden_layers": 4}, on_chip=True) / ms("bert-base", 8, on_chip=True)
    assert 1.6 < ratio < 2.0, ratio


def test_fp8_is_faster_only_through_the_matrix_units():
    timing = TimingModel("c600")
    model_fp16 = trace_model(_small_bert(), 16, "fp16")
    model_fp8 = trace_model(_small_bert(), 16, "fp8")
    tiles = get_device("c600").tiles
    fp8_ops = [op for op in model_fp8.ops if op.op != "cast_fp8"]
    casts = [op for op in model_fp8.ops if op.op == "cast_fp8"]
    assert len(fp8_ops) == len(model_fp16.ops) and casts  # FP8 adds the activation casts, nothing else
    for a, b in zip(model_fp16.ops, fp8_ops):
        assert (a.op, a.name) == (b.op, b.name)
        ta, tb = timing.op_cost(a, tiles).total, timing.op_cost(b, tiles).total
        if a.kind == "matrix":
            assert b.compute_type == "fp8" and tb < ta, a.name
        else:
            assert tb == pytest.approx(ta, rel=1e-12), f"{a.name}: a {a.kind} op changed speed at FP8"
    # weights-only FP8 keeps the FP16 matrix rate: it can only save weight bytes, never compute
    weights_only = trace_model(_small_bert(), 16, "fp8-weights")
    for a, b in zip(model_fp16.ops, weights_only.ops):
        if a.kind == "matrix":
            assert b.compute_type == "fp16"
            assert timing.matrix_cost(b, tiles).compute == pytest.approx(timing.matrix_cost(a, tiles).compute)
    assert ms("bert-base", 16, "fp8") < ms("bert-base", 16, "fp16")


def test_fp8_skip_list_keeps_ops_at_fp16():
    types = data_types("fp8", "resnet50")
    assert "resnet.encoder.stages.0.layers.0.shortcut.convolution" in types.skip
    assert types.matrix_types("resnet.encoder.stages.0.layers.0.shortcut.convolution")[0] == "fp16"
    assert types.matrix_types("resnet.embedder.embedder.convolution")[0] == "fp8"
    assert types.matrix_types("resnet.encoder.stages.0.layers.0.layer.0.convolution")[0] == "fp8"


def test_a_device_without_fp8_says_so():
    with pytest.raises(ValueError, match="no fp8 matrix units"):
        predict("bert-base", 4, "fp8", "gc200", overrides=SMALL_BERT, execution=UNPACKED)
    assert ms("bert-base", 8, device="bow") < ms("bert-base", 8, device="gc200")  # same tiles, faster clock


def test_calibration_rows_fit_within_the_reported_error():
    reported = load_calibration()
    results = calibration.evaluate(calibration.load_rows(), calibrated_parameters())
    stored = {(r["model"], r["precision"], r["batch"]): r for r in reported["row"]}
    print("\n" + calibration.format_table(results, calibrated_parameters()))
    for r in results:
        key = (r.row.model, r.row.precision, r.row.batch)
        assert r.error == pytest.approx(stored[key]["error"], abs=1e-4), f"{key}: the model changed since calibrate --write"
        if r.row.fit:
            assert abs(r.error) <= reported["fit"]["max_abs_error"] + 1e-9, key
    assert reported["fit"]["max_abs_error"] < 0.15


def test_refit_reproduces_the_stored_parameters():
    params, _ = calibration.fit()
    stored = calibrated_parameters()
    for key, value in params.as_dict().items():
        assert value == pytest.approx(getattr(stored, key), rel=0.02), key


def test_packing_is_first_fit_within_the_row_length():
    rows = first_fit([300, 100, 84, 384, 1, 200], 384)
    assert rows == [[0, 2], [1, 4, 5], [3]]
    stats = packing_stats(40, 384)
    assert 1.5 < stats.sequences_per_pack < 384 / stats.mean_length
    assert 0.8 < stats.token_efficiency <= 1.0
    assert packing_stats(1, 384).sequences_per_pack < stats.sequences_per_pack  # more rows, more places to fit


def test_sram_check_counts_live_activations_and_flags_what_does_not_fit():
    def op(out_mb, sources=()):
        return OpRecord(op="add", name="x", kind="vector", flops=0.0, in_bytes=0.0, out_bytes=out_mb * 1e6, sources=sources)

    # op 0's output (300 MB) is read again by op 3 (a residual): it is live while ops 1 and 2 run
    trace = Trace("synthetic", "fp16", 1, ops=[op(300), op(200, (0,)), op(100, (1,)), op(50, (2, 0))], weight_bytes=350e6)
    fit = memory_fit(trace, get_device("c600"))
    assert fit.activation_bytes == pytest.approx(600e6)  # ops 0 + 1 + 2 live together; op 1 dies after op 2 reads it
    assert fit.total_bytes == pytest.approx(950e6) and not fit.fits
    assert "does NOT fit" in fit.message("synthetic") and "more IPUs" in fit.message("synthetic")
    trace.weight_bytes = 250e6
    assert memory_fit(trace, get_device("c600")).fits
    small = memory_fit(trace_model(_small_bert(), 1, "fp16"), get_device("c600"))
    assert small.fits and small.weight_bytes > 0 and small.activation_bytes > 0


def test_predict_json_has_the_documented_keys(capsys):
    assert main(["predict", "widedeep", "--batch-size", "1024", "--precision", "fp16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(JSON_KEYS) <= set(out)
    assert set(out["breakdown_ms"]) == {"compute", "exchange", "sync", "host"}
    assert out["samples_per_second"] == pytest.approx(1024 / out["device_ms_per_batch"] * 1e3)
    assert sum(out["breakdown_ms"].values()) == pytest.approx(out["device_ms_per_batch"], rel=1e-9)


def test_predict_overrides_config_fields(capsys):
    args = ["predict", "bert-base", "--batch-size", "2", "--precision", "fp8", "--no-packing", "--json", "--set"]
    assert main(args + [f"{k}={v}" for k, v in SMALL_BERT.items()]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config_overrides"] == {k: str(v) for k, v in SMALL_BERT.items()} and out["packed"] is False


@pytest.mark.parametrize("args, message", [
    (["gpt5", "--batch-size", "1", "--precision", "fp16"], "expected one of: albert, bert-base"),
    (["widedeep", "--batch-size", "1", "--precision", "int4"], "expected one of: fp16"),
    (["widedeep", "--batch-size", "1", "--precision", "fp16", "--device", "tpu"], "expected one of: c600"),
    (["widedeep", "--batch-size", "1", "--precision", "fp16", "--set", "depth=3"], "valid fields: bucket_sizes"),
])
def test_predict_errors_list_the_valid_choices(capsys, args, message):
    assert main(["predict", *args]) == 4
    assert message in capsys.readouterr().err


def _model(name, overrides):
    from conformance.hardware.ipu.timing.predict import load_traced_model

    return load_traced_model(name, overrides)


def _small_bert():
    return _model("bert-base", SMALL_BERT)


@pytest.mark.parametrize("model, overrides", [("resnet50", {"image_size": 64}), ("bert-base", SMALL_BERT), ("widedeep", {})])
def test_extrapolated_trace_equals_the_real_trace(model, overrides):
    for batch in (1, 7):
        fake, real = extrapolated_trace(model, batch, "fp16", overrides), model_trace(model, batch, "fp16", overrides)
        assert [dc.asdict(op) for op in fake.ops] == [dc.asdict(op) for op in real.ops]
        assert (fake.input_bytes, fake.output_bytes, fake.weight_bytes) == (real.input_bytes, real.output_bytes, real.weight_bytes)
        assert memory_estimate(model, batch, "fp16", "c600", overrides) == memory_fit(real, get_device("c600"))


def test_a_trace_holds_no_activations_and_follows_every_operand_through_reshapes():
    """A trace records shapes only: tracing RoFormer at batch 64 (attention scores alone 3.2 GB at float32) allocates
    next to nothing, and an op's sources follow its operands through the model's reshapes and transposes."""
    import tracemalloc

    from conformance.hardware.ipu.timing.trace import trace_model

    model = _model("roformer", {})
    tracemalloc.start()
    try:
        trace = trace_model(model, 64, "fp16")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64e6, peak
    index = {op.name: i for i, op in enumerate(trace.ops)}
    scores = next(op for op in trace.ops if op.name.endswith("layer.0.attention.self.scores"))
    producers = {trace.ops[s].name for s in scores.sources}
    # queries scaled, keys rotated, made contiguous and transposed
    layer = "roformer.encoder.layer.0.attention.self"
    assert producers == {f"{layer}.scale", f"{layer}.key.rotary"}, producers
    assert all(s < index[scores.name] for s in scores.sources)
