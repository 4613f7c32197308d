"""The release profile establishes every gate it runs: for each model, its samples hold enough evaluation units that
every gated ratio check of the model (every backend's accuracy tables) is established by the confidence rule the
verdicts use (``confidence.units_needed``): when the hardware keeps the FP32 decisions, and where the correct emulator
is measured to change them (resnet50's seeded weights on synthetic images), at the measured rates. The counts are
derived here from the gates, so a new gate, or a tier made gating, that needs more units fails this test until the
profile grows.

The units of a model are what its task metrics count (an image, a SQuAD row, a RoFormer pair of two rows, a wide&deep
row), measured on the model's own synthetic samples (the samples a profile runs), at small sizes so that it is quick; a
label metric counts the same units of a user's data set."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.accuracy.confidence import units_needed, units_to_establish
from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.accuracy.metrics import mean_metric, task_unit_metrics
from conformance.targets.accuracy import load_targets, parse_targets
from conformance.targets.profiles import load_profiles
from models import MODEL_NAMES, load_model
from models.seeds import EVAL_SEED

PROFILES = load_profiles()
RELEASE = PROFILES["release"]
_TEXT = dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=24, vocab_size=300,
             seq_len=64)
# Each model at a size that builds in a moment: the sizes do not change how many units a sample holds.
SMALL = {
    "bert-base": _TEXT,
    "albert": {**_TEXT, "embedding_size": 8},
    "roformer": {**_TEXT, "embedding_size": 16},
    "resnet50": dict(embedding_size=8, hidden_sizes=(16, 16, 16, 16), depths=(1, 1, 1, 1), image_size=32),
    "widedeep": dict(hidden_sizes=(8,), bucket_sizes=(7,) * 26),
    "conformer": dict(hidden_size=16, num_attention_heads=2, intermediate_size=16, num_hidden_layers=1, frames=16,
                      feature_bins=8),
}
PROBE_SAMPLES = 8  # synthetic samples the units are counted on (even: RoFormer's pairs are two rows)


# What the correct ipu emulator measured on resnet50's seeded weights and the release profile's 2048 synthetic images
# (docs/accuracy.md, "resnet50 at FP8"): per metric, (FP32 units right, units the hardware lost of those, units it gained
# of the others, units). Agreement counts against FP32's own decisions (all right); a label metric against the images'
# classes (FP32 top-1 76.3%, top-5 96.4%). A gate not listed kept FP32's decisions there (or was not measured).
MEASURED = {
    ("ipu", "resnet50", "fp8", "top1_agreement"): (2048, 49, 0, 2048),
    ("ipu", "resnet50", "fp8", "top1_accuracy"): (1563, 23, 10, 2048),
    ("ipu", "resnet50", "fp8", "top5_accuracy"): (1974, 2, 5, 2048),
    ("ipu", "resnet50", "fp8-weights", "top1_agreement"): (2048, 31, 0, 2048),
    ("ipu", "resnet50", "fp8-weights", "top1_accuracy"): (1563, 16, 4, 2048),
    ("ipu", "resnet50", "fp8-weights", "top5_accuracy"): (1974, 4, 2, 2048),
    ("ipu", "resnet50", "fp16-half-partials", "top1_agreement"): (2048, 4, 0, 2048),
    ("ipu", "resnet50", "fp16-half-partials", "top1_accuracy"): (1563, 1, 1, 2048),
    ("ipu", "resnet50", "fp16-half-partials", "top5_accuracy"): (1974, 2, 0, 2048),
    ("ipu", "resnet50", "fp16", "top1_agreement"): (2048, 2, 0, 2048),
    ("ipu", "resnet50", "fp16", "top1_accuracy"): (1563, 1, 1, 2048),
}
# albert's FP8 on the release profile's 368 synthetic questions (docs/accuracy.md, "albert at the release profile"):
# answers lost of FP32's (without a data set the squad_* metrics score against FP32's answers too). F1 counts a lost
# answer whole here, which needs more units than its partial credit does.
for _precision, _lost in (("fp8", 3), ("fp8-weights", 1)):
    for _metric in ("exact_match", "f1", "squad_exact_match", "squad_f1"):
        MEASURED[("ipu", "albert", _precision, _metric)] = (368, _lost, 0, 368)
# roformer's FP8 on the first 368 pairs of its release profile (docs/accuracy.md, "roformer at the release profile"):
# pair decisions lost of FP32's.
for _precision, _lost in (("fp8", 1), ("fp8-weights", 0)):
    MEASURED[("ipu", "roformer", _precision, "pairwise_order_agreement")] = (368, _lost, 0, 368)
# resnet50's label metrics on its synthetic images: FP32's units right of 2048 (a gate with no measured change keeps them)
FP32_LABEL_HITS = {"top1_accuracy": 1563, "top5_accuracy": 1974}


def scores(right: int, lost: int, gained: int, units: int):
    """(hardware, FP32) per-unit scores with these counts."""
    base = np.zeros(units)
    base[:right] = 1.0
    hardware = base.copy()
    hardware[:lost] = 0.0
    hardware[right:right + gained] = 1.0
    return mean_metric(hardware), mean_metric(base)


def units_for(gate) -> int:
    """The units that establish ``gate`` (a gated ratio) at the measured rates (all agreeing where none is measured)."""
    key = (gate.hardware, gate.model, gate.precision, gate.metric)
    if key in MEASURED:
        counts = MEASURED[key]
    elif gate.model == "resnet50" and gate.metric in FP32_LABEL_HITS:  # the synthetic images' labels, kept
        counts = (FP32_LABEL_HITS[gate.metric], 0, 0, 2048)
    else:
        return units_to_establish(gate.ratio)
    needed = units_needed(*scores(*counts), gate.ratio)
    assert needed is not None, (f"{gate.check} of [{gate.hardware}.{gate.model}.{gate.precision}]: the measured "
                                f"{counts} miss {gate.ratio} at any count: the correct emulator fails the gate")
    return needed


def units_required(gates) -> int:
    """The evaluation units that establish every gated ratio check of ``gates`` at the measured rates (0 without any:
    tensor floors and absolute bounds are facts of the samples run, not estimates)."""
    return max((units_for(g) for g in gates if g.gating and g.of is not None), default=0)


def units_of(name: str, samples: int) -> int:
    """The units the task metrics of ``name`` count in ``samples`` synthetic samples (0 for a model without task
    metrics); a model whose metrics count different units is an AssertionError naming them."""
    model = load_model(name, seed=0, **SMALL[name])
    inputs = model.sample_inputs(samples, seed=EVAL_SEED)
    outputs = model(inputs)
    counted = {metric: m.units for metric, m in task_unit_metrics(name, outputs, outputs, inputs).items()}
    assert len(set(counted.values())) <= 1, f"{name}: its task metrics count different units: {counted}"
    return next(iter(counted.values()), 0)


@pytest.fixture(scope="module")
def samples_per_unit() -> dict[str, float]:
    """Per model with task metrics, the synthetic samples one evaluation unit takes."""
    out = {}
    for name in MODEL_NAMES:
        units = units_of(name, PROBE_SAMPLES)
        if units:
            out[name] = PROBE_SAMPLES / units
    return out


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_release_profile_establishes_every_gated_ratio_of_the_model(name, samples_per_unit):
    gates = [g for g in load_targets() if g.model == name]
    assert gates, f"no gates for {name}"
    required = units_required(gates)
    if required == 0:  # tensor floors only (conformer): nothing to establish
        return
    assert name in samples_per_unit, f"{name} has gated ratios but no task metric counts its units"
    units = RELEASE.samples[name] / samples_per_unit[name]
    worst = max((g for g in gates if g.gating and g.of is not None), key=units_for)
    assert units >= required, (
        f"profile release runs {RELEASE.samples[name]} {name} samples ({units:g} units); establishing {worst.check} "
        f"of [{worst.hardware}.{name}.{worst.precision}] takes {required} units: raise "
        f"[release].samples.{name} in profiles.toml to at least {required * samples_per_unit[name]:g}")
    assert RELEASE.samples[name] % samples_per_unit[name] == 0, "whole units: a RoFormer pair is two rows"


def test_the_rule_follows_the_gates():
    """A gate made stricter needs more units than the profile has: the check above then fails."""
    gating_tier = parse_targets('[ipu.albert.fp16]\nexact_match = { of = "fp32", ratio = 0.999 }\n')
    assert units_required(gating_tier) == units_to_establish(0.999) > RELEASE.samples["albert"]
    reported_tier = parse_targets('[ipu.albert.fp16]\nexact_match = { of = "fp32", ratio = 0.99, tier = 0.999 }\n')
    assert units_required(reported_tier) == units_to_establish(0.99)  # the reported tier gates nothing
    assert units_required(parse_targets("[ipu.resnet50.fp16]\nsnr_db = { min = 30.0 }\n")) == 0


def test_the_units_are_what_the_metrics_count(samples_per_unit):
    """An image, a SQuAD row and a wide&deep row are one unit each; a RoFormer pair is two rows; conformer has no task
    metric. Counted, not assumed: the rows of RoFormer's pairs come from its sample generator."""
    assert samples_per_unit == {"resnet50": 1, "bert-base": 1, "albert": 1, "widedeep": 1, "roformer": 2}


def test_the_other_profiles_keep_their_meaning():
    """smoke, default and full are what they were: default and full show that no sampled decision changed without
    establishing the agreement tiers of the image and text models (those take the release profile's samples); the
    release profile runs at least full's samples of every model, and times its LoadGen runs and audits as default."""
    for profile in ("smoke", "default", "full"):
        for name in ("resnet50", "bert-base", "albert"):
            assert PROFILES[profile].samples[name] < units_required([g for g in load_targets() if g.model == name])
    for name in MODEL_NAMES:
        assert PROFILES["smoke"].samples[name] <= PROFILES["default"].samples[name] <= PROFILES["full"].samples[name]
        assert PROFILES["full"].samples[name] <= RELEASE.samples[name]
    default, release = PROFILES["default"].performance, RELEASE.performance
    assert (release.min_duration_ms, release.performance_samples) == (default.min_duration_ms,
                                                                      default.performance_samples)
    assert release.min_query_count == {hardware: default.min_query_count[hardware]
                                       for hardware in release.min_query_count}  # backends shipped on their own aside
    assert RELEASE.audit == PROFILES["default"].audit
    assert RELEASE.strict_xfails and PROFILES["default"].strict_xfails and not PROFILES["smoke"].strict_xfails


def test_the_release_batches_spread_over_workers():
    """Each model's run splits into many batches, so that workers share it (wide&deep's batches take milliseconds:
    a handful suffice)."""
    for name in MODEL_NAMES:
        batches = -(-RELEASE.samples[name] // RELEASE.batch_size[name])
        assert batches >= 8, f"{name}: {batches} batches"


def test_the_release_rows_establish_widedeeps_label_ratios():
    """wide&deep's gates are ratios against labels, whose bound counts the units either precision gets right (fewer
    than the rows): with the FP32 outputs kept, the release profile's rows still establish every gated one, and an
    edited profile below ``units_to_establish`` establishes none."""
    gates = [g for g in load_targets() if g.model == "widedeep" and g.hardware == "ipu" and g.precision == "fp16"
             and g.of is not None and g.metric in ("accuracy", "auc")]  # click_*: with a data set only
    for rows, established in ((RELEASE.samples["widedeep"], True), (units_to_establish(0.99) - 1, False)):
        p = np.random.default_rng(0).random(rows).astype(np.float32)
        fp32 = compute_metrics("widedeep", *({"probabilities": np.stack([1 - p, p], axis=1)},) * 2, {})
        found = {e.gate.check: e.established for e in evaluate(gates, fp32, {"fp32": fp32}) if e.gate.gating}
        assert found and all(v is established for v in found.values()), (rows, found)


def test_the_measured_rates_size_albert():
    """albert's release questions establish its FP8 answer gates at the rates the correct emulator shows, with room for
    twice fp8's losses; MLPerf's 99% tier, reported, would take thousands of questions."""
    gates = [g for g in load_targets() if g.model == "albert" and g.hardware == "ipu"]
    assert RELEASE.samples["albert"] >= units_required(gates)
    assert units_needed(*scores(368, 6, 0, 368), 0.96) <= RELEASE.samples["albert"]
    strict = parse_targets('[ipu.albert.fp8]\nexact_match = { of = "fp32", ratio = 0.99 }\n')
    assert units_required(strict) > 20 * RELEASE.samples["albert"]


def test_the_measured_rates_size_resnet50():
    """resnet50's release images establish its gates at the rates the correct emulator shows (more than FP32's own
    decisions would take), and MLPerf's 99% top-1 tier at FP8, reported, would take tens of thousands of images."""
    gates = [g for g in load_targets() if g.model == "resnet50" and g.hardware == "ipu"]
    assert units_required(gates) > units_to_establish(0.99)
    assert RELEASE.samples["resnet50"] >= units_required(gates)
    strict = parse_targets('[ipu.resnet50.fp8]\ntop1_accuracy = { of = "fp32", ratio = 0.99 }\n')
    assert units_required(strict) > 30 * RELEASE.samples["resnet50"] // 2
    failing = parse_targets('[ipu.resnet50.fp8]\ntop1_agreement = { of = "fp32", ratio = 0.99 }\n')
    with pytest.raises(AssertionError, match="miss 0.99 at any count: the correct emulator fails the gate"):
        units_required(failing)
