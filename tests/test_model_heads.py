"""The fitted classifier head a model author calls so that seeded weights decide like trained ones."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from models.heads import fit_class_head


def _backbone(seed: int, rows: int, classes: int, inputs: int = 32, hidden: int = 64):
    """Features of a random ReLU layer on inputs drawn around class centres, and their planted labels."""
    model = np.random.default_rng(100 + classes)  # the classes and the backbone: one per class count
    centres = model.normal(size=(classes, inputs))
    w1 = model.normal(scale=np.sqrt(2 / inputs), size=(inputs, hidden))
    rng = np.random.default_rng(seed)  # the rows
    labels = rng.integers(0, classes, rows)
    x = centres[labels] + rng.normal(scale=1.0, size=(rows, inputs))
    return np.maximum(x @ w1, 0.0), labels


def test_the_unscaled_head_is_ridge_least_squares():
    features, labels = _backbone(0, 200, 5)
    weight, bias = fit_class_head(features, labels, 5, ridge=0.3)
    # the oracle: ridge regression as an augmented least-squares problem (numpy's lstsq, not the normal equations)
    centred = features - features.mean(axis=0)
    targets = np.eye(5)[labels] - 0.2
    lam = 0.3 * np.trace(centred.T @ centred / len(features)) / features.shape[1]
    a = np.vstack([centred / np.sqrt(len(features)), np.sqrt(lam) * np.eye(features.shape[1])])
    b = np.vstack([targets / np.sqrt(len(features)), np.zeros((features.shape[1], 5))])
    expected = np.linalg.lstsq(a, b, rcond=None)[0].T
    ratio = weight / expected
    np.testing.assert_allclose(ratio, ratio.flat[0], rtol=1e-3)  # the same directions, one scale
    logits = features @ weight.T + bias
    own = logits[np.arange(len(labels)), labels]
    assert np.mean(own - (logits.sum(axis=1) - own) / 4) == pytest.approx(12.0, rel=1e-4)
    np.testing.assert_allclose((features.mean(axis=0) @ weight.T + bias), 0.0, atol=1e-4)


def test_a_fitted_head_keeps_its_decisions_under_rounding_where_a_random_one_does_not():
    features, labels = _backbone(1, 200, 10)  # the fit: planted labels, a seed of their own
    weight, bias = fit_class_head(features, labels, 10)
    held_out, held_labels = _backbone(2, 400, 10)  # evaluation rows: another seed, the same backbone's classes
    rng = np.random.default_rng(3)
    random_weight = rng.normal(scale=np.sqrt(1 / features.shape[1]), size=weight.shape).astype(np.float32)

    def agreement(w, b, fmt):  # top-1 of the head on FP8-rounded features against its FP32 top-1
        exact = held_out @ w.T + b
        rounded = held_out.astype(fmt).astype(np.float64) @ w.astype(fmt).astype(np.float64).T + b
        return np.mean(exact.argmax(axis=1) == rounded.argmax(axis=1))

    fitted = agreement(weight, bias, ml_dtypes.float8_e4m3fn)
    random = agreement(random_weight, np.zeros(10, np.float32), ml_dtypes.float8_e4m3fn)
    assert fitted > random
    assert fitted >= 0.99 and random < 0.95
    assert np.mean((held_out @ weight.T + bias).argmax(axis=1) == held_labels) > 0.95  # it learnt the classes


def test_bad_inputs_are_refused():
    features, labels = _backbone(0, 20, 3)
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\)"):
        fit_class_head(features, labels + 3, 3)
    with pytest.raises(ValueError, match="at least two classes"):
        fit_class_head(features, labels * 0, 1)
    with pytest.raises(ValueError, match="expected \\(n, d\\) and \\(n,\\)"):
        fit_class_head(features[0], labels, 3)
    bad = features.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        fit_class_head(bad, labels, 3)
    with pytest.raises(ValueError, match="do not separate the labels"):
        fit_class_head(np.ones_like(features), labels, 3)
