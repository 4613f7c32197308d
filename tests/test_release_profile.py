"""The release profile establishes every gate it runs: for each model, its samples hold enough evaluation units that
every gated ratio check of the model (every backend's accuracy tables) is established when the hardware keeps the FP32
decisions, by the confidence rule the verdicts use (``confidence.units_to_establish``). The counts are derived here from
the gates, so a new gate, or a tier made gating, that needs more units fails this test until the profile grows.

The units of a model are what its task metrics count (an image, a SQuAD row, a RoFormer pair of two rows, a wide&deep
row), measured on the model's own synthetic samples (the samples a profile runs), at small sizes so that it is quick; a
label metric counts the same units of a user's data set."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.accuracy.confidence import units_to_establish
from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.accuracy.metrics import task_unit_metrics
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


def units_required(gates) -> int:
    """The evaluation units that establish every gated ratio check of ``gates`` when no unit disagrees (0 without
    any: tensor floors and absolute bounds are facts of the samples run, not estimates)."""
    return max((units_to_establish(g.ratio) for g in gates if g.gating and g.of is not None), default=0)


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
    worst = max((g for g in gates if g.gating and g.of is not None), key=lambda g: units_to_establish(g.ratio))
    assert units >= required, (
        f"profile release runs {RELEASE.samples[name]} {name} samples ({units:g} units); establishing {worst.check} "
        f"of [{worst.hardware}.{name}.{worst.precision}] takes {required} units that all agree: raise "
        f"[release].samples.{name} in profiles.toml to at least {required * samples_per_unit[name]:g}")
    assert RELEASE.samples[name] % samples_per_unit[name] == 0, "whole units: a RoFormer pair is two rows"


def test_the_rule_follows_the_gates():
    """A gate made stricter needs more units than the profile has: the check above then fails."""
    gating_tier = parse_targets('[ipu.resnet50.fp16]\ntop1_agreement = { of = "fp32", ratio = 0.999 }\n')
    assert units_required(gating_tier) == units_to_establish(0.999) > RELEASE.samples["resnet50"]
    reported_tier = parse_targets('[ipu.resnet50.fp16]\ntop1_agreement = { of = "fp32", ratio = 0.99, tier = 0.999 }\n')
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
