"""The report's pictures: histogram bins, the layer profile's blocks, latency from LoadGen's logged percentiles, the
throughput curve against the timing model's own prediction, "simulated" in the titles of simulated figures, and PNGs
that Pillow reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conformance.hardware.ipu.timing.cost import default_execution
from conformance.hardware.ipu.timing.predict import predict
from conformance.report import plots
from conformance.targets.performance import load_performance_targets

BERT_NAMES = (["bert.embeddings.word_embeddings", "bert.embeddings.LayerNorm"]
              + [f"bert.encoder.layer.{i}.{op}" for i in range(3) for op in ("attention.self.query", "output.LayerNorm")]
              + ["qa_outputs"])


def test_bins_are_numpys_auto_capped():
    rng = np.random.default_rng(0)
    small = rng.normal(size=200)
    assert np.array_equal(plots.bin_edges(small), np.histogram_bin_edges(small, bins="auto"))
    large = rng.standard_cauchy(size=100_000)  # heavy tails: "auto" asks for thousands of bins
    assert np.histogram_bin_edges(large, bins="auto").size - 1 > plots.MAX_BINS
    edges = plots.bin_edges(large)
    assert edges.size - 1 == plots.MAX_BINS and edges[0] == large.min() and edges[-1] == large.max()
    assert plots.bin_edges(np.zeros(10)).size >= 2  # a difference of exactly zero still has a bin


def test_layer_blocks_name_encoder_layers_stages_and_shared_layers():
    assert plots.layer_blocks(BERT_NAMES) == [("embeddings", 0, 2), ("layer 0", 2, 4), ("layer 1", 4, 6),
                                              ("layer 2", 6, 8), ("qa_outputs", 8, 9)]
    resnet = ["pixel_values", "resnet.embedder.embedder.convolution", "resnet.encoder.stages.0.layers.0.residual",
              "resnet.encoder.stages.0.layers.1.residual", "resnet.encoder.stages.1.layers.0.residual", "resnet.pooler",
              "classifier.1"]
    assert [label for label, _, _ in plots.layer_blocks(resnet)] == [
        "pixel_values", "embedder", "stages 0", "stages 1", "pooler", "classifier 1"]
    # one shared ALBERT layer applied three times: a block per application
    albert = [f"albert.encoder.albert_layer_groups.0.albert_layers.0.ffn{suffix}" for suffix in ("", "#2", "#3")]
    assert [label for label, _, _ in plots.layer_blocks(albert)] == [
        "albert_layer_groups 0", "albert_layer_groups 0 #2", "albert_layer_groups 0 #3"]
    # wide&deep's 26 embedding tables would be 26 blocks of one op: grouped one level up
    widedeep = ([f"wide.categorical.{f}" for f in range(26)] + ["wide"] + [f"deep.embeddings.{f}" for f in range(26)]
                + ["deep.mlp.0", "deep.mlp.0.activation", "deep.head", "logit"])
    blocks = plots.layer_blocks(widedeep)
    assert [label for label, _, _ in blocks] == ["categorical", "wide", "embeddings", "mlp", "head", "logit"]
    assert blocks[0][1:] == (0, 26) and sum(stop - start for _, start, stop in blocks) == len(widedeep)


def test_latency_points_are_the_logged_percentiles(tmp_path):
    summary = {"details": {"result_min_latency_ns": 500_000, "result_max_latency_ns": 9_000_000,
                           **{f"result_{p}_percentile_latency_ns": v for p, v in
                              [("50.00", 1_000_000), ("90.00", 2_000_000), ("95.00", 2_500_000), ("97.00", 3_000_000),
                               ("99.00", 4_000_000), ("99.90", 8_000_000)]}}}
    log = tmp_path / "loadgen" / "resnet50-fp8-Server"
    log.mkdir(parents=True)
    (log / plots.SUMMARY_FILE).write_text(json.dumps(summary))
    record = {"scenario": "Server", "details": {"log_dir": "loadgen/resnet50-fp8-Server"}}
    assert plots.logged_latencies(tmp_path, record) == [("min", 0.5), ("p50", 1.0), ("p90", 2.0), ("p95", 2.5),
                                                         ("p97", 3.0), ("p99", 4.0), ("p99.9", 8.0), ("max", 9.0)]
    # a LoadGen detail log (the real LoadGen), MultiStream's figures per query
    real = tmp_path / "real"
    real.mkdir()
    lines = [f':::MLLOG {json.dumps({"key": f"result_{p}_percentile_per_query_latency_ns", "value": v})}'
             for p, v in [("50.00", 3_000_000), ("99.00", 6_000_000)]]
    (real / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")
    assert plots.logged_latencies(tmp_path, {"scenario": "MultiStream", "details": {"log_dir": str(real)}}) == [
        ("p50", 3.0), ("p99", 6.0)]
    assert plots.logged_latencies(tmp_path, {"scenario": "Server", "details": {"log_dir": "missing"}}) == []


def test_throughput_curve_is_the_timing_models_prediction():
    """Each point is what ``ipu-conformance predict`` predicts for that many rows (wide&deep: 1024 rows a sample),
    per sample; the batch of the runs is performance.toml's max_batch and is on the curve."""
    curve = plots.throughput_curve("widedeep", "fp8", "c600", "ipu")
    run = load_performance_targets().models["widedeep"]
    assert curve["chosen"] == run.max_batch["ipu"] and curve["chosen"] in curve["batches"]
    assert max(curve["batches"]) <= 2 * curve["chosen"] and curve["batches"][0] == 1
    execution = default_execution("widedeep", packed=False)
    for batch in (1, curve["chosen"]):
        expected = predict("widedeep", batch * run.rows_per_sample, "fp8", "c600", execution=execution)
        got = curve["samples_per_s"][curve["batches"].index(batch)]
        assert got == pytest.approx(expected.samples_per_second / run.rows_per_sample, rel=1e-9)
        assert curve["fits"][curve["batches"].index(batch)] == expected.memory.fits


def _records(log_dir: str) -> list[dict]:
    profile = [[name, 40.0 - 2 * i] for i, name in enumerate(BERT_NAMES)]
    profile[4][1] = None  # a non-finite op output
    accuracy = {"kind": "accuracy", "model": "bert-base", "precision": "fp8", "check": "snr_db", "value": 17.0,
                "target": 10.0, "op": ">=", "units": "dB", "gating": True, "passed": True,
                "details": {"per_output": {"end_logits": 18.8, "start_logits": 17.0}, "layer_snr_db": profile,
                            "first_jump": BERT_NAMES[4], "first_jump_drop_db": None}}
    simulated = {"timing": "simulated", "clock": "virtual", "hardware": "ipu", "log_dir": log_dir,
                 "timing_model": {"chip": "c600"}}
    latency = {"kind": "performance", "model": "bert-base", "precision": "fp8", "scenario": "SingleStream",
               "check": "p90_latency_ms", "value": 0.85, "target": 3.3, "op": "<=", "units": "ms", "gating": True,
               "passed": True, "details": simulated}
    return [accuracy, latency]


def test_write_plots_draws_every_kind_and_says_simulated(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(1)
    reference = {name: rng.normal(size=(2, 384)).astype(np.float32) for name in ("start_logits", "end_logits")}
    arrays = {f"reference__{k}": v for k, v in reference.items()}
    arrays.update({f"hardware__{k}": v + rng.normal(scale=0.1, size=v.shape).astype(np.float32)
                   for k, v in reference.items()})
    (tmp_path / "artifacts").mkdir()
    np.savez(tmp_path / "artifacts" / "bert-base-fp8.npz", **arrays)
    log = tmp_path / "loadgen" / "bert-base-fp8-SingleStream"
    log.mkdir(parents=True)
    (log / plots.SUMMARY_FILE).write_text(json.dumps({"details": {"result_min_latency_ns": 800_000,
                                                                  "result_90.00_percentile_latency_ns": 850_000,
                                                                  "result_max_latency_ns": 900_000}}))
    curve = {"batches": [1, 2, 4], "samples_per_s": [100.0, 180.0, 300.0], "fits": [True, True, False], "chosen": 2,
             "packed": True, "rows_per_sample": 1}
    monkeypatch.setattr(plots, "throughput_curve", lambda *args: curve)  # the timing model is checked above
    titles = {}
    real_png = plots._png

    def capture(fig, canvas):
        texts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
        texts += [ax.get_title() for ax in fig.axes]
        texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        titles[len(titles)] = texts
        return real_png(fig, canvas)
    monkeypatch.setattr(plots, "_png", capture)

    info = plots.write_plots(tmp_path, _records("loadgen/bert-base-fp8-SingleStream"))
    kinds = ["histograms", "layer-snr", "latency", "throughput"]
    assert info["status"] == "written"
    assert info["files"] == {"bert-base-fp8": [f"plots/bert-base-fp8-{kind}.png" for kind in kinds]}
    assert "no per-query latencies" in info["reason"]
    for kind in kinds:
        with Image.open(tmp_path / "plots" / f"bert-base-fp8-{kind}.png") as image:
            assert image.format == "PNG" and image.size[0] >= 700
    histograms, layers, latency, throughput = (" | ".join(titles[i]) for i in range(4))
    assert "start_logits: 768 values, SNR 17 dB (gate snr_db >= 10 dB)" in histograms
    assert "end_logits: 768 values, SNR 18.8 dB" in histograms
    assert "simulated" not in histograms and "simulated" not in layers
    assert "gate: model output snr_db >= 10 dB" in layers
    assert "first jump: layer 1: attention.self.query" in layers and "non-finite output (1 ops)" in layers
    assert "SingleStream (simulated)" in latency and "bound 3.3 ms" in latency and "gated p90_latency_ms: 0.85 ms" in latency
    assert "(simulated: timing model)" in throughput and "batch of the runs: 2 (180 samples/s)" in throughput
    assert "predicted, exceeds the SRAM" in throughput


def test_measured_latency_is_not_called_simulated_and_missing_logs_are_noted(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    [_, latency] = _records("nowhere")
    latency["details"] = {**latency["details"], "timing": "measured", "timing_model": None}
    info = plots.write_plots(tmp_path, [latency])
    assert info["files"] == {} and "no LoadGen log with latency percentiles at nowhere" in info["reason"]
