"""Seeded weights that decide like trained ones: a classifier head fitted in closed form to planted labels.

A random head over random features puts the top two logits of a row about a quarter of the logit spread apart (the
expected gap of the top two of n normal values), so FP16 and FP8 rounding noise reorders them and a precision fails
its agreement gates for a reason no trained model has. A trained head separates its classes by a margin. The built-in
models fit theirs to the labels their sample generators plant (resnet50's classifier, the QA span heads of bert-base
and albert, roformer's similarity head); :func:`fit_class_head` is the same recipe for a model author's own
architecture: run the seeded backbone in FP32 on samples whose labels are planted (a seed disjoint from the
evaluation's and the FP8 calibration's), and fit the head to them.
"""

from __future__ import annotations

import numpy as np

# A trained classifier's top-1 logit stands about 10-15 above the others (ResNet-50 on ImageNet).
CLASS_MARGIN = 12.0
# The ridge added to the features' covariance, relative to its mean variance: keeps the solve well posed with fewer
# samples than features and keeps the head's weights at the features' scale.
CLASS_RIDGE = 0.1


def fit_class_head(features, labels, num_classes: int, margin: float = CLASS_MARGIN,
                   ridge: float = CLASS_RIDGE) -> tuple[np.ndarray, np.ndarray]:
    """The ``(num_classes, d)`` weight and ``(num_classes,)`` bias of a linear head ``logits = features @ W.T + b``
    that picks each row's label from its FP32 ``features`` ``(n, d)``: ridge least squares of the centred features
    onto the centred one-hot labels (each class's row answers to what sets it apart, not to what every row shares),
    scaled so that a row's own logit stands ``margin`` above the mean of its others on average, the bias putting the
    features' mean at logit 0. A ValueError for labels outside ``[0, num_classes)``, fewer than two classes, or
    features that are not finite."""
    x = np.asarray(features, np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"features of shape {x.shape} and labels of shape {y.shape}: expected (n, d) and (n,)")
    if num_classes < 2:
        raise ValueError(f"num_classes {num_classes}: a head needs at least two classes")
    if len(y) == 0 or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"labels must be integers in [0, {num_classes}), one per row")
    if not np.isfinite(x).all():
        raise ValueError("features hold non-finite values")
    mean = x.mean(axis=0)
    centred = x - mean
    targets = np.eye(num_classes)[y] - 1.0 / num_classes
    gram = centred.T @ centred / len(x)
    gram[np.diag_indices_from(gram)] += ridge * max(np.trace(gram) / len(gram), np.finfo(np.float64).tiny)
    weight = np.linalg.solve(gram, centred.T @ targets / len(x))  # (d, classes)
    z = centred @ weight
    own = z[np.arange(len(y)), y]
    gap = float(np.mean(own - (z.sum(axis=1) - own) / (num_classes - 1)))
    if not gap > 0:
        raise ValueError("the features do not separate the labels at all (every row's own logit is at or below "
                         "the others'): fit on features of the seeded backbone that differ between classes")
    weight *= margin / gap
    return weight.T.astype(np.float32), (-(mean @ weight)).astype(np.float32)


__all__ = ["CLASS_MARGIN", "CLASS_RIDGE", "fit_class_head"]
