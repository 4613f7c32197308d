"""Accuracy metrics against hand-computed values and independent implementations."""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from conformance.accuracy import metrics


# -- tensor level ---------------------------------------------------------------------------------------------------
def test_tensor_metrics_hand_computed():
    ref = np.array([1.0, -2.0, 4.0, 0.5], np.float32)
    hw = np.array([1.5, -2.0, 3.0, 0.5], np.float32)
    m = metrics.tensor_metrics(ref, hw)
    # |diff| = [0.5, 0, 1, 0]; rel = [0.5, 0, 0.25, 0]
    assert m["mean_abs_diff"] == pytest.approx(0.375)
    assert m["std_abs_diff"] == pytest.approx(np.std([0.5, 0, 1, 0]))
    assert m["max_abs_diff"] == pytest.approx(1.0)
    assert m["max_rel_diff"] == pytest.approx(0.5)
    assert m["mean_rel_diff"] == pytest.approx(0.1875)
    # signal 1 + 4 + 16 + 0.25 = 21.25, noise 0.25 + 1 = 1.25
    assert m["snr_db"] == pytest.approx(10 * np.log10(21.25 / 1.25))
    dot = 1.5 + 4 + 12 + 0.25
    assert m["cosine"] == pytest.approx(dot / (np.sqrt(21.25) * np.sqrt(2.25 + 4 + 9 + 0.25)))


def test_snr_of_identical_and_zero_tensors():
    x = np.arange(6, dtype=np.float32)
    assert metrics.snr_db(x, x) == metrics.SNR_IDENTICAL_DB
    assert metrics.snr_db(np.zeros(3), np.ones(3)) == float("-inf")
    assert metrics.cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert metrics.cosine(np.zeros(3), np.ones(3)) == 0.0


def test_snr_matches_known_noise_power():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(200_000)
    hw = ref + rng.standard_normal(200_000) * 0.1  # noise power 1/100 of the signal: 20 dB
    assert metrics.snr_db(ref, hw) == pytest.approx(20.0, abs=0.1)


def test_shape_mismatch_is_an_error():
    with pytest.raises(metrics.MetricError, match=r"shape \(3,\).*\(4,\)"):
        metrics.tensor_metrics(np.zeros(4), np.zeros(3), "logits")


def test_per_sample_snr():
    ref = np.array([[1.0, 1.0], [2.0, 0.0]])
    hw = np.array([[1.0, 1.0], [1.0, 0.0]])
    snr = metrics.per_sample_snr_db(ref, hw)
    assert snr[0] == metrics.SNR_IDENTICAL_DB
    assert snr[1] == pytest.approx(10 * np.log10(4.0 / 1.0))


# -- resnet50 -------------------------------------------------------------------------------------------------------
def test_topk_agreement():
    ref = np.array([[0.0, 5.0, 1.0, 2.0], [3.0, 0.0, 1.0, 2.0], [0.0, 0.0, 9.0, 1.0]])
    hw = np.array([[0.0, 1.0, 5.0, 2.0], [3.0, 0.0, 1.0, 2.0], [9.0, 8.0, 0.0, 7.0]])
    # labels [1, 0, 2]; hw argmax [2, 0, 0]; hw top-3 of sample 0 = {2, 3, 1}, of sample 2 = {0, 1, 3}
    assert metrics.topk_agreement(ref, hw, 1) == pytest.approx(1 / 3)
    assert metrics.topk_agreement(ref, hw, 3) == pytest.approx(2 / 3)
    assert metrics.topk_agreement(ref, ref, 1) == 1.0


# -- SQuAD spans ----------------------------------------------------------------------------------------------------
def _official_f1(prediction: str, ground_truth: str) -> float:
    """SQuAD v1.1 evaluate-v1.1.py ``f1_score`` with its ``normalize_answer``, transcribed."""

    def normalize_answer(s):
        s = s.lower()
        s = "".join(ch for ch in s if ch not in set(string.punctuation))
        s = re.sub(r"\b(a|an|the)\b", " ", s)
        return " ".join(s.split())

    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def test_squad_f1_equals_the_official_formula():
    rng = np.random.default_rng(1)
    for _ in range(300):
        pred = rng.integers(0, 6, size=rng.integers(1, 8)).tolist()
        truth = rng.integers(0, 6, size=rng.integers(1, 8)).tolist()
        words = lambda ids: " ".join(f"w{i}" for i in ids)  # noqa: E731
        assert metrics.squad_f1(pred, truth) == pytest.approx(_official_f1(words(pred), words(truth)))


def _brute_force_span(start, end, mask, max_len):
    best, arg = -np.inf, (-1, -1)
    for i in range(len(start)):
        for j in range(i, min(i + max_len, len(start))):
            if mask[i] and mask[j] and start[i] + end[j] > best:
                best, arg = start[i] + end[j], (i, j)
    return arg


def test_best_spans_equal_brute_force():
    rng = np.random.default_rng(2)
    start = rng.standard_normal((20, 60))
    end = rng.standard_normal((20, 60))
    mask = rng.random((20, 60)) < 0.6
    mask[3] = False  # a sample without context
    spans = metrics.best_spans(start, end, mask, max_answer_tokens=7)
    for b in range(20):
        assert tuple(spans[b]) == _brute_force_span(start[b], end[b], mask[b], 7)


def test_best_span_respects_order_and_length():
    start = np.array([[-1.0, 0.0, 0.0, 9.0, 0.0]])
    end = np.array([[9.0, 0.0, 1.0, 0.0, 0.0]])  # the best end lies before the best start: not allowed
    spans = metrics.best_spans(start, end, np.ones((1, 5), bool), max_answer_tokens=30)
    assert tuple(spans[0]) == (3, 3)


def test_span_scores():
    ids = np.array([[5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6]])
    ref = np.array([[1, 3], [0, 1]])
    hw = np.array([[2, 4], [0, 1]])  # sample 0: tokens [7, 8, 9] vs [6, 7, 8]: 2 common -> F1 2/3
    scores = metrics.span_scores(ref, hw, ids)
    assert scores["exact_match"] == pytest.approx(0.5)
    assert scores["f1"] == pytest.approx((2 / 3 + 1.0) / 2)


def test_squad_context_mask_drops_the_final_sep():
    inputs = {
        "token_type_ids": np.array([[0, 0, 0, 1, 1, 1, 0]]),
        "attention_mask": np.array([[1, 1, 1, 1, 1, 1, 0]]),
    }
    assert metrics.squad_context_mask(inputs).tolist() == [[False, False, False, True, True, False, False]]


# -- roformer -------------------------------------------------------------------------------------------------------
def test_pairwise_order_agreement():
    ref = np.array([2.0, 1.0, 0.0, 3.0, 5.0, 4.0])
    hw = np.array([2.0, 1.5, 1.0, 0.5, 5.0, 4.0])  # pair 1 flips
    assert metrics.pairwise_order_agreement(ref, hw) == pytest.approx(2 / 3)
    with pytest.raises(metrics.MetricError, match="even"):
        metrics.pairwise_order_agreement(ref[:5], hw[:5])


def test_similarity_score_of_one_logit_head():
    assert metrics.similarity_score(np.array([[1.5], [-2.0]])).tolist() == [1.5, -2.0]
    assert metrics.similarity_score(np.array([[0.0, 1.0], [3.0, 1.0]])).tolist() == [1.0, -2.0]


# -- wide&deep ------------------------------------------------------------------------------------------------------
def test_auc_equals_mann_whitney():
    rng = np.random.default_rng(3)
    for ties in (False, True):
        scores = rng.random(2000)
        if ties:
            scores = np.round(scores, 2)  # many tied scores
        labels = (rng.random(2000) < scores).astype(int)
        u = stats.mannwhitneyu(scores[labels == 1], scores[labels == 0]).statistic
        expected = u / (labels.sum() * (len(labels) - labels.sum()))
        assert metrics.roc_auc(scores, labels) == pytest.approx(expected, rel=1e-12)


def test_auc_hand_computed_and_degenerate():
    # positives 0.8, 0.4; negatives 0.5, 0.1: pairs (0.8>0.5, 0.8>0.1, 0.4<0.5, 0.4>0.1) -> 3/4
    assert metrics.roc_auc([0.8, 0.5, 0.4, 0.1], [1, 0, 1, 0]) == pytest.approx(0.75)
    assert metrics.roc_auc([0.5, 0.5], [1, 0]) == pytest.approx(0.5)
    assert np.isnan(metrics.roc_auc([0.1, 0.2], [1, 1]))


def test_widedeep_labels_are_seeded_bernoulli_draws():
    p = np.full(100_000, 0.3)
    labels = metrics.widedeep_labels(p)
    assert np.array_equal(labels, metrics.widedeep_labels(p))
    assert labels.mean() == pytest.approx(0.3, abs=0.01)
    assert set(np.unique(metrics.widedeep_labels(np.array([0.0, 1.0])))) == {0, 1}


def test_accuracy_at_threshold():
    assert metrics.accuracy_at([0.9, 0.2, 0.5, 0.4], [1, 0, 0, 1]) == pytest.approx(0.5)


def test_task_metrics_of_the_reference_against_itself_are_perfect():
    rng = np.random.default_rng(4)
    logits = {"logits": rng.standard_normal((8, 1000))}
    assert metrics.task_metrics("resnet50", logits, logits, {}) == {"top1_agreement": 1.0, "top5_agreement": 1.0}
    inputs = {"input_ids": rng.integers(0, 50, (4, 32)), "attention_mask": np.ones((4, 32), int),
              "token_type_ids": np.r_[[0] * 10, [1] * 22][None].repeat(4, 0)}
    qa = {"start_logits": rng.standard_normal((4, 32)), "end_logits": rng.standard_normal((4, 32))}
    assert metrics.task_metrics("bert-base", qa, qa, inputs) == {"exact_match": 1.0, "f1": 1.0}
    with pytest.raises(metrics.MetricError, match="unknown-model"):
        metrics.task_metrics("unknown-model", {}, {}, {})


def test_error_bias_tells_truncation_from_round_to_nearest():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=20000).astype(np.float32)
    nearest = ref.astype(np.float16).astype(np.float32)
    bits = ref.view(np.uint32) & np.uint32(0xFFFFE000)  # float32 with the 13 bits FP16 drops cleared: toward zero
    truncated = bits.view(np.float32)
    assert metrics.error_bias(ref, nearest) < 0.05
    assert metrics.error_bias(ref, truncated) > 0.5  # uniform in [-ulp, 0]: (ulp / 2) / (ulp / sqrt 3) per binade
    assert metrics.error_bias(ref, ref * 1.06) == pytest.approx(np.sqrt(2 / np.pi), rel=0.02)  # mean|x| / rms(x)
    assert metrics.error_bias(ref, ref) == 0.0
