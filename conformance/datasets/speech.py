"""Conformer evaluation data: a ``.npz`` holding ``src`` (N, channels, mel bins, frames) float features and
``src_pad_mask`` (N, frames / 4) bool, True = padded (see ``models/conformer.py``), shaped for the model's config.
There are no labels: the conformer is judged by its tensor gates only. Arrays are read without pickle, header first:
their shapes and dtypes are checked before any data is decompressed, and only the utterances asked for are (see
:func:`conformance.fileio.read_npz`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conformance.datasets.base import DatasetError, EvaluationSet, expect_file, input_budget, sha256_files
from conformance.fileio import read_npz

ARRAYS = ("src", "src_pad_mask")


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def read_arrays(path: Path, config=None, limit: int | None = None) -> dict[str, np.ndarray]:
    """The first ``limit`` utterances (all when None) of ``src`` and ``src_pad_mask`` of an npz (no pickle); with
    ``config`` (the model's), shapes and dtypes are checked from the arrays' headers before their data is read. A
    DatasetError names what is missing, mis-shaped or unreadable."""
    shapes: dict[str, tuple] = {}

    def inspect(name: str, shape: tuple, dtype: np.dtype) -> None:
        shapes[name] = shape
        if config is None:
            return
        c = config
        if name == "src":
            expected = ("N", c.in_channels, c.feature_bins, c.frames)
            if len(shape) != 4 or shape[1:] != expected[1:]:
                raise DatasetError(f"{path}: array 'src' has shape {_shape(shape)}, expected {_shape(expected)} "
                                   "(utterances, channels, mel bins, frames) for the model's config")
            if not np.issubdtype(dtype, np.floating):
                raise DatasetError(f"{path}: array 'src' has dtype {dtype}, expected float features")
        else:
            expected = ("N", c.subsampled_frames)
            if len(shape) != 2 or shape[1] != c.subsampled_frames:
                raise DatasetError(f"{path}: array 'src_pad_mask' has shape {_shape(shape)}, expected "
                                   f"{_shape(expected)} (utterances, frames / 4 = {c.frames} / 4)")
            if dtype != np.bool_ and not np.issubdtype(dtype, np.integer):
                raise DatasetError(f"{path}: array 'src_pad_mask' has dtype {dtype}, expected bool (True = padded "
                                   "frame)")
            if shapes["src"][0] != shape[0]:
                raise DatasetError(f"{path}: 'src' has {shapes['src'][0]} utterances, 'src_pad_mask' {shape[0]}")

    return read_npz(path, f"an .npz archive of {', '.join(ARRAYS)}", ARRAYS, rows=limit, max_bytes=input_budget(),
                    error=DatasetError, inspect=inspect)


def load(path, model, checkpoint=None, limit: int | None = None) -> EvaluationSet:
    """The utterances of an npz as the conformer's ``src`` (float32) and ``src_pad_mask`` (bool); no scorer."""
    path = expect_file(path, f"an .npz file with {', '.join(ARRAYS)}")
    if limit is not None and limit < 1:
        raise DatasetError(f"{path}: limit {limit}: expected at least 1 utterance")
    c = model.config
    arrays = read_arrays(path, c, limit)
    src, mask = arrays["src"], arrays["src_pad_mask"]
    if len(src) == 0:
        raise DatasetError(f"{path}: no utterances (arrays 'src' and 'src_pad_mask' are empty)")
    if mask.dtype != np.bool_ and not np.isin(mask, (0, 1)).all():
        raise DatasetError(f"{path}: array 'src_pad_mask' has dtype {mask.dtype} with values other than 0/1, "
                           "expected bool (True = padded frame)")
    src = src.astype(np.float32)
    mask = mask.astype(bool)
    bad = ~np.isfinite(src)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DatasetError(f"{path}: array 'src' has {int(bad.sum())} non-finite value(s) (NaN, Inf, or beyond "
                           f"float32), the first at {index}")
    empty = np.flatnonzero(mask.all(axis=1))
    if len(empty):
        raise DatasetError(f"{path}: 'src_pad_mask' marks every frame of utterance(s) {empty[:5].tolist()}"
                           + (f" and {len(empty) - 5} more" if len(empty) > 5 else "") + " as padding")
    n = len(src)
    provenance = {
        "format": "conformer-npz",
        "path": str(path),
        "sha256": sha256_files([path]),
        "units": n,
        "rows": n,
        "labels": "none (tensor gates only)",
        "preprocessing": {
            "src": f"as stored ({arrays['src'].dtype} -> float32)",
            "src_pad_mask": "True = padded frame, one entry per 4 input frames",
            "padded_fraction": round(float(mask.mean()), 4),
        },
    }
    return EvaluationSet(model=model.name, inputs={"src": src, "src_pad_mask": mask}, units=n, provenance=provenance)
