"""Accuracy metrics of a hardware's outputs against the FP32 reference outputs of the same inputs.

Two levels:

- tensor level (:func:`tensor_metrics`): the seed benchmark's five numbers (mean/std/max absolute difference, max/mean
  relative difference), cosine similarity and signal-to-noise ratio in dB;
- task level (:func:`task_metrics`): each model's task metric with the FP32 predictions as the labels, so FP32 scores
  1.0 on its own labels and a hardware's score says how often it agrees with FP32.

No real data sets are available offline; the FP32 predictions are the ground truth that "agreement" is measured
against (for wide&deep, labels are drawn once from the FP32 click probabilities, see :func:`widedeep_labels`).
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from conformance.targets.accuracy import GRAPH_CASE, TASK_METRICS
from models import model_spec, model_specs

# SNR reported when the outputs are bit-identical: far beyond what float32 can resolve (~150 dB), finite for JSON.
SNR_IDENTICAL_DB = 300.0
# SQuAD v1.1 post-processing: answers are at most this many tokens long.
MAX_ANSWER_TOKENS = 30
# Seed of the wide&deep click labels drawn from the FP32 probabilities; one draw per evaluation set.
WIDEDEEP_LABEL_SEED = 20160624

class MetricError(ValueError):
    """Outputs that cannot be compared: mismatched shapes, missing outputs, non-finite values."""


def _as_pair(reference, hardware, what: str) -> tuple[np.ndarray, np.ndarray]:
    ref = np.asarray(reference, np.float64)
    hw = np.asarray(hardware, np.float64)
    if ref.shape != hw.shape:
        raise MetricError(f"{what}: hardware output has shape {hw.shape}, the reference {ref.shape}")
    if ref.size == 0:
        raise MetricError(f"{what}: empty output")
    return ref, hw


def nonfinite_count(x) -> int:
    """How many values of ``x`` are NaN or +-Inf."""
    return int(np.size(x) - np.count_nonzero(np.isfinite(x)))


# -- tensor level ---------------------------------------------------------------------------------------------------
def snr_db(reference, hardware, what: str = "output") -> float:
    """``10 log10(sum ref^2 / sum (hw - ref)^2)``; SNR_IDENTICAL_DB when the two are equal, -inf for a zero reference
    with a nonzero error."""
    ref, hw = _as_pair(reference, hardware, what)
    signal = float(np.sum(ref * ref))
    noise = float(np.sum((hw - ref) ** 2))
    if noise == 0.0:
        return SNR_IDENTICAL_DB
    if signal == 0.0:
        return float("-inf")
    return min(10.0 * np.log10(signal / noise), SNR_IDENTICAL_DB)


def cosine(reference, hardware, what: str = "output") -> float:
    """Cosine similarity of the flattened tensors (1.0 for two zero tensors, 0.0 when only one is zero)."""
    ref, hw = _as_pair(reference, hardware, what)
    ref, hw = ref.ravel(), hw.ravel()
    nr, nh = float(np.linalg.norm(ref)), float(np.linalg.norm(hw))
    if nr == 0.0 and nh == 0.0:
        return 1.0
    if nr == 0.0 or nh == 0.0:
        return 0.0
    return float(np.dot(ref, hw) / (nr * nh))


def tensor_metrics(reference, hardware, what: str = "output") -> dict[str, float]:
    """The seed benchmark's five numbers plus cosine and SNR of one output, and ``values``: how many values they
    summarise. Relative differences divide by |ref| (where ref is 0 they use the smallest normal float32, which is
    why max_rel_diff is never a gate)."""
    ref, hw = _as_pair(reference, hardware, what)
    diff = np.abs(hw - ref)
    rel = diff / np.maximum(np.abs(ref), np.finfo(np.float32).tiny)
    return {
        "mean_abs_diff": float(diff.mean()),
        "std_abs_diff": float(diff.std()),
        "max_abs_diff": float(diff.max()),
        "max_rel_diff": float(rel.max()),
        "mean_rel_diff": float(rel.mean()),
        "cosine": cosine(ref, hw, what),
        "snr_db": snr_db(ref, hw, what),
        "error_bias": error_bias(ref, hw, what),
        "values": int(ref.size),
    }


def error_bias(reference, hardware, what: str = "output") -> float:
    """``|mean(e * sign(ref))| / rms(e)`` with ``e = hw - ref``: the share of the error that systematically shrinks
    (or grows) the values' magnitudes. Round-to-nearest-even is unbiased, so a correct emulator's error averages out
    (~1/sqrt(n) for n independent errors); truncation shrinks every rounded magnitude and a scale error grows or
    shrinks them all, which this measures where SNR only sees a larger error. 0 when the outputs are identical."""
    ref, hw = _as_pair(reference, hardware, what)
    e = (hw.astype(np.float64) - ref).ravel()
    rms = float(np.sqrt(np.mean(e * e))) if e.size else 0.0
    if rms == 0.0:
        return 0.0
    return abs(float(np.mean(e * np.sign(ref.ravel())))) / rms


def per_sample_snr_db(reference, hardware, what: str = "output") -> np.ndarray:
    """SNR of each sample (first axis), for picking the worst samples to diagnose."""
    ref, hw = _as_pair(reference, hardware, what)
    ref = ref.reshape(len(ref), -1)
    hw = hw.reshape(len(hw), -1)
    signal = np.sum(ref * ref, axis=1)
    noise = np.sum((hw - ref) ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = 10.0 * np.log10(signal / noise)
    snr[noise == 0] = SNR_IDENTICAL_DB
    return np.minimum(snr, SNR_IDENTICAL_DB)


# -- resnet50: classification agreement -----------------------------------------------------------------------------
def topk_hits(reference_logits, hardware_logits, k: int) -> np.ndarray:
    """Per sample: whether its FP32 top-1 class is among the hardware's top-``k`` classes."""
    ref, hw = _as_pair(reference_logits, hardware_logits, "logits")
    labels = np.argmax(ref, axis=-1)
    if k == 1:
        return np.argmax(hw, axis=-1) == labels
    top = np.argpartition(-hw, k - 1, axis=-1)[..., :k]
    return np.any(top == labels[:, None], axis=-1)


def topk_agreement(reference_logits, hardware_logits, k: int) -> float:
    """Fraction of samples whose FP32 top-1 class is among the hardware's top-``k`` classes."""
    return float(np.mean(topk_hits(reference_logits, hardware_logits, k)))


# -- bert/albert: SQuAD-style answer spans --------------------------------------------------------------------------
def best_spans(start_logits, end_logits, context_mask, max_answer_tokens: int = MAX_ANSWER_TOKENS) -> np.ndarray:
    """The best answer span of each sample, as SQuAD post-processing picks it: the (start, end) maximising
    ``start_logits[start] + end_logits[end]`` with start <= end, ``end - start + 1 <= max_answer_tokens`` and both
    positions inside the context. Returns (batch, 2) int; (-1, -1) when a sample has no context position.
    Ties go to the earliest start, then the earliest end."""
    start = np.asarray(start_logits, np.float64)
    end = np.asarray(end_logits, np.float64)
    mask = np.asarray(context_mask, bool)
    if not (start.shape == end.shape == mask.shape) or start.ndim != 2:
        raise MetricError(f"spans: start {start.shape}, end {end.shape} and context mask {mask.shape} must be equal (batch, seq)")
    batch, seq = start.shape
    s = np.where(mask, start, -np.inf)
    e = np.where(mask, end, -np.inf)
    # score[b, i, L] = s[b, i] + e[b, i + L] for answer lengths L + 1 = 1..max_answer_tokens
    lengths = min(max_answer_tokens, seq)
    e_pad = np.concatenate([e, np.full((batch, lengths - 1), -np.inf)], axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(e_pad, lengths, axis=1)[:, :seq]  # (B, seq, lengths)
    score = s[:, :, None] + windows
    flat = score.reshape(batch, -1)
    best = np.argmax(flat, axis=1)
    spans = np.stack([best // lengths, best // lengths + best % lengths], axis=1).astype(np.int64)
    spans[~np.isfinite(flat[np.arange(batch), best])] = -1
    return spans


def squad_f1(prediction_tokens, truth_tokens) -> float:
    """The SQuAD v1.1 F1 of two token sequences: harmonic mean of precision and recall of the common tokens
    (multiset intersection), 0 when nothing is shared."""
    common = Counter(prediction_tokens) & Counter(truth_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(prediction_tokens)
    recall = same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def span_scores(reference_spans, hardware_spans, token_ids) -> dict[str, float]:
    """Exact match and SQuAD F1 of the hardware's answer spans against the FP32 spans (the labels), over the answer
    tokens (``token_ids[b, start:end + 1]``); a missing span (-1) scores 0 unless both are missing."""
    return {k: float(np.mean(v)) for k, v in span_unit_scores(reference_spans, hardware_spans, token_ids).items()}


def span_unit_scores(reference_spans, hardware_spans, token_ids) -> dict[str, np.ndarray]:
    """Per row: exact match (0/1) and SQuAD F1 of :func:`span_scores`."""
    ref = np.asarray(reference_spans)
    hw = np.asarray(hardware_spans)
    ids = np.asarray(token_ids)
    em, f1 = [], []
    for b in range(len(ref)):
        (rs, re_), (hs, he) = ref[b], hw[b]
        if rs < 0 or hs < 0:
            same = float(rs < 0 and hs < 0)
            em.append(same)
            f1.append(same)
            continue
        em.append(float(rs == hs and re_ == he))
        f1.append(squad_f1(ids[b, hs:he + 1].tolist(), ids[b, rs:re_ + 1].tolist()))
    return {"exact_match": np.array(em), "f1": np.array(f1)}


def squad_context_mask(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Positions an answer may occupy: the second segment (token_type_ids == 1), attended, minus its final [SEP]."""
    mask = (np.asarray(inputs["token_type_ids"]) == 1) & (np.asarray(inputs["attention_mask"]) != 0)
    last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)  # last context position of each row: its [SEP]
    rows = np.flatnonzero(mask.any(axis=1))
    mask[rows, last[rows]] = False
    return mask


# -- roformer: pairwise order ---------------------------------------------------------------------------------------
def pairwise_order_agreement(reference_scores, hardware_scores) -> float:
    """CAIL2019-SCM's metric with FP32 as the labels: samples come as interleaved pairs (A,B),(A,C); the fraction of
    pairs where the hardware orders ``score[2k]`` vs ``score[2k+1]`` as FP32 does."""
    return float(np.mean(pair_order_hits(reference_scores, hardware_scores)))


def pair_order_hits(reference_scores, hardware_scores) -> np.ndarray:
    """Per pair (A,B),(A,C): whether the hardware orders the two scores as FP32 does."""
    ref, hw = _as_pair(reference_scores, hardware_scores, "scores")
    ref, hw = ref.reshape(len(ref)), hw.reshape(len(hw))
    if len(ref) % 2:
        raise MetricError(f"pairwise order needs an even number of scores (interleaved pairs), got {len(ref)}")
    return (ref[0::2] > ref[1::2]) == (hw[0::2] > hw[1::2])


# -- wide&deep: accuracy and AUC on labels drawn from FP32 ----------------------------------------------------------
def widedeep_labels(reference_probability, seed: int = WIDEDEEP_LABEL_SEED) -> np.ndarray:
    """Click labels drawn once from the FP32 click probabilities: label ~ Bernoulli(p_fp32), seeded."""
    p = np.asarray(reference_probability, np.float64).ravel()
    return (np.random.default_rng(seed).random(p.shape) < p).astype(np.int8)


def accuracy_at(probability, labels, threshold: float = 0.5) -> float:
    """Fraction of samples where ``probability >= threshold`` equals the label."""
    p = np.asarray(probability, np.float64).ravel()
    return float(np.mean((p >= threshold) == (np.asarray(labels).ravel() != 0)))


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve: the probability that a random positive scores above a random negative, ties counting
    one half (the rank-sum form, average ranks for ties). NaN when one class is absent."""
    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).ravel() != 0
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    # average rank (1-based) of each group of tied scores
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(avg, ends - starts)
    rank_sum = float(ranks[y].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def click_probability(probabilities) -> np.ndarray:
    """The positive-class probability of wide&deep's output ((batch, 2) two-class probabilities, or (batch,) / (batch, 1))."""
    p = np.asarray(probabilities)
    if p.ndim == 2 and p.shape[1] == 2:
        return p[:, 1]
    return p.reshape(len(p))


# -- per model --------------------------------------------------------------------------------------------------------
# The output whose tensor-level metrics are gated, per model (others are reported), from the models' specs.
PRIMARY_OUTPUT = {name: spec.primary_output for name, spec in model_specs().items()}


@dataclass(frozen=True)
class TaskMetric:
    """A task metric as a statistic of its evaluation units (images, SQuAD rows, RoFormer pairs, wide&deep rows), so
    that resampling the units gives its sampling distribution (:mod:`conformance.accuracy.confidence`).

    ``scores``: per-unit scores in [0, 1] when the metric is their mean (agreements, exact match, F1, accuracy);
    ``statistic``: the metric on the units at the given indices (for every metric; AUC is not a mean);
    ``placements``: for AUC, the placement values of the positives and of the negatives (:func:`auc_placements`),
    each of which the AUC is the mean of; ``resampled``: where given, ``statistic`` of each row of a (resamples,
    units) index array at once, the same values (a bootstrap's thousands of resamples without a loop per resample)."""

    units: int
    statistic: Callable[[np.ndarray], float]
    scores: np.ndarray | None = None
    placements: tuple[np.ndarray, np.ndarray] | None = None
    resampled: Callable[[np.ndarray], np.ndarray] | None = None

    def statistics(self, resamples: np.ndarray) -> np.ndarray:
        """``statistic`` of each row of ``resamples`` (float64)."""
        if self.resampled is not None:
            return self.resampled(resamples)
        return np.array([self.statistic(idx) for idx in resamples], np.float64)

    @property
    def value(self) -> float:
        return float(self.statistic(np.arange(self.units)))


def mean_metric(scores) -> TaskMetric:
    scores = np.asarray(scores, np.float64)
    return TaskMetric(len(scores), lambda idx: float(np.mean(scores[idx])), scores)


def auc_placements(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's placement values: per positive, the fraction of negatives it scores above (ties one half); per
    negative, the fraction of positives that score above it. The AUC is the mean of either."""
    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).ravel() != 0
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    if len(pos) == 0 or len(neg) == 0:
        return np.zeros(0), np.zeros(0)
    below = np.searchsorted(neg, s[y], "left") + 0.5 * (np.searchsorted(neg, s[y], "right")
                                                        - np.searchsorted(neg, s[y], "left"))
    above = (len(pos) - np.searchsorted(pos, s[~y], "right")) + 0.5 * (np.searchsorted(pos, s[~y], "right")
                                                                        - np.searchsorted(pos, s[~y], "left"))
    return below / len(neg), above / len(pos)


def resampled_roc_auc(scores, labels, resamples: np.ndarray, chunk_elements: int = 1 << 16) -> np.ndarray:
    """:func:`roc_auc` of ``scores[idx], labels[idx]`` for each row ``idx`` of ``resamples``, bit for bit: the scores
    are grouped once (tied scores in one group, in score order), each resample counts the positives and negatives it
    draws per group, so that twice the Mann-Whitney U (ties one half) is an integer sum over the groups, and the AUC
    is ``U / (positives x negatives)`` with one rounding, as the rank-sum form gives it."""
    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).ravel() != 0
    resamples = np.asarray(resamples)
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    group = np.empty(len(s), np.int64)
    group[order] = np.cumsum(np.r_[False, sorted_s[1:] != sorted_s[:-1]])
    groups = int(group.max()) + 1 if len(s) else 0
    code = 2 * group + y  # (group, class) of each row
    out = np.empty(len(resamples), np.float64)
    rows = max(1, chunk_elements // max(1, 2 * groups))
    for first in range(0, len(resamples), rows):
        idx = resamples[first:first + rows]
        r = len(idx)
        flat = (np.arange(r, dtype=np.int64)[:, None] * (2 * groups) + code[idx]).ravel()
        drawn = np.bincount(flat, minlength=r * 2 * groups).reshape(r, groups, 2)  # per group: negatives, positives
        neg, pos = drawn[..., 0], drawn[..., 1]
        below = np.cumsum(neg, axis=1) - neg
        twice_u = (pos * (2 * below + neg)).sum(axis=1)
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = (twice_u / 2.0) / (n_pos * n_neg).astype(np.float64)
        out[first:first + r] = np.where((n_pos == 0) | (n_neg == 0), np.nan, value)
    if np.isnan(s).any():  # NaN never ties, not even with itself: its copies' ranks follow the draw order
        for row in np.flatnonzero(np.isnan(s)[resamples].any(axis=1)):
            out[row] = roc_auc(s[resamples[row]], y[resamples[row]])
    return out


def auc_metric(scores, labels) -> TaskMetric:
    """ROC AUC of ``scores`` against ``labels`` as a statistic of the rows, with its placement values."""
    s = np.asarray(scores, np.float64).ravel()
    y = np.asarray(labels).ravel()
    return TaskMetric(len(y), lambda idx: roc_auc(s[idx], y[idx]), placements=auc_placements(s, y),
                      resampled=lambda resamples: resampled_roc_auc(s, y, resamples))


# -- task scorers a model's spec names (``task_scorer``): (reference, hardware, inputs) -> {metric: TaskMetric} ------
def classification_agreement(reference: dict, hardware: dict, inputs: dict) -> dict[str, TaskMetric]:
    """Top-1 and top-5 agreement of the ``logits`` output's classes with the FP32 model's."""
    ref, hw = _as_pair(reference["logits"], hardware["logits"], "logits")
    return {"top1_agreement": mean_metric(topk_hits(ref, hw, 1)), "top5_agreement": mean_metric(topk_hits(ref, hw, 5))}


def squad_span_agreement(reference: dict, hardware: dict, inputs: dict) -> dict[str, TaskMetric]:
    """SQuAD exact match and F1 of the answer spans (``start_logits``, ``end_logits``) against the FP32 model's."""
    context = squad_context_mask(inputs)
    ref_spans = best_spans(reference["start_logits"], reference["end_logits"], context)
    hw_spans = best_spans(hardware["start_logits"], hardware["end_logits"], context)
    return {k: mean_metric(v) for k, v in span_unit_scores(ref_spans, hw_spans, inputs["input_ids"]).items()}


def pair_order_agreement(reference: dict, hardware: dict, inputs: dict) -> dict[str, TaskMetric]:
    """Whether each pair of rows is ordered by the similarity score (``logits``) as the FP32 model orders it."""
    hits = pair_order_hits(similarity_score(reference["logits"]), similarity_score(hardware["logits"]))
    return {"pairwise_order_agreement": mean_metric(hits)}


def click_agreement(reference: dict, hardware: dict, inputs: dict) -> dict[str, TaskMetric]:
    """Click accuracy (at 0.5) and AUC of the ``probabilities`` output against labels drawn once from the FP32 click
    probabilities (:func:`widedeep_labels`)."""
    p_ref = click_probability(reference["probabilities"])
    labels = widedeep_labels(p_ref)
    p_hw = click_probability(hardware["probabilities"])
    correct = (p_hw >= 0.5) == (labels != 0)
    return {"accuracy": mean_metric(correct),
            "auc": auc_metric(p_hw, labels)}


@lru_cache(maxsize=None)
def task_scorer(model_name: str) -> Callable | None:
    """The task scorer model ``model_name``'s spec names (None where the tensor metrics judge it alone)."""
    spec = model_spec(model_name)
    if spec.task_scorer is None:
        return None
    module_name, _, attribute = spec.task_scorer.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise MetricError(f"model {model_name!r}: task_scorer {spec.task_scorer!r} cannot be loaded: {exc}") from None


def task_unit_metrics(model_name: str, reference: dict, hardware: dict, inputs: dict) -> dict[str, TaskMetric]:
    """Task metrics of ``hardware`` outputs against ``reference`` outputs (the FP32 predictions are the labels), each
    as a statistic of its evaluation units. Scoring the reference against itself gives the FP32 figure a ratio gate
    is relative to."""
    if model_name == GRAPH_CASE:  # decisions where an output holds class scores; the tensor metrics judge the rest
        names = decision_outputs({name: np.shape(value) for name, value in reference.items()})
        if not names:
            return {}
        hits = [topk_positions(reference[name], hardware[name]) for name in names]
        return {"top1_agreement": mean_metric(np.mean(np.concatenate(hits, axis=1), axis=1))}
    if model_name not in TASK_METRICS:
        raise MetricError(f"no task metrics for model {model_name!r}; known: {', '.join(TASK_METRICS)}")
    scorer = task_scorer(model_name)
    if scorer is None:  # no task of its own: the tensor metrics judge it
        return {}
    found = scorer(reference, hardware, inputs)
    if set(found) != set(TASK_METRICS[model_name]):
        raise MetricError(f"model {model_name!r}: its task scorer gave {sorted(found)}, its spec declares "
                          f"{sorted(TASK_METRICS[model_name])}")
    return {name: found[name] for name in TASK_METRICS[model_name]}


DECISION_NAME = re.compile(r"logit|score|prob", re.IGNORECASE)


def decision_outputs(shapes: dict) -> list[str]:
    """The outputs of an imported graph that hold decisions, by name and shape: named as class scores (``logits``,
    ``scores``, ``probabilities``) with a last axis over at least two classes, per sample (batch, classes) or per
    position (batch, ..., classes: next-token logits)."""
    return [name for name, shape in shapes.items() if DECISION_NAME.search(name) and len(shape) >= 2
            and isinstance(shape[-1], (int, np.integer)) and shape[-1] >= 2]


def topk_positions(reference, hardware) -> np.ndarray:
    """(samples, positions): whether the hardware's top-1 class is the reference's at each position of each sample."""
    ref, hw = np.asarray(reference), np.asarray(hardware)
    if ref.shape != hw.shape:
        raise MetricError(f"decision output of shape {hw.shape}, the reference's is {ref.shape}")
    return (ref.argmax(axis=-1) == hw.argmax(axis=-1)).reshape(len(ref), -1)


def task_metrics(model_name: str, reference: dict, hardware: dict, inputs: dict) -> dict[str, float]:
    """The values of :func:`task_unit_metrics`."""
    return {name: m.value for name, m in task_unit_metrics(model_name, reference, hardware, inputs).items()}


def similarity_score(logits) -> np.ndarray:
    """RoFormer's similarity score: the logit of the "similar" class minus the other for a two-class head, the single
    logit for a one-output head. Monotone in the softmax probability, so the pair order is the same."""
    x = np.asarray(logits, np.float64)
    if x.ndim == 2 and x.shape[1] == 2:
        return x[:, 1] - x[:, 0]
    return x.reshape(len(x))
