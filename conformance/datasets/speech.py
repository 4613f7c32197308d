"""Conformer evaluation data: a ``.npz`` holding ``src`` (N, channels, mel bins, frames) float features and
``src_pad_mask`` (N, frames / 4) bool, True = padded (see ``models/conformer.py``), shaped for the model's config.
There are no labels: the conformer is judged by its tensor gates only. Arrays are read without pickle."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from conformance.datasets.base import DatasetError, EvaluationSet, expect_file, sha256_files

ARRAYS = ("src", "src_pad_mask")


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """``src`` and ``src_pad_mask`` of an npz (no pickle); a DatasetError naming what is missing or unreadable."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise DatasetError(f"{path}: a single .npy array; expected an .npz archive of {', '.join(ARRAYS)}")
        with data:
            missing = [name for name in ARRAYS if name not in data.files]
            if missing:
                raise DatasetError(f"{path}: no array(s) {missing}; it holds {sorted(data.files)}, expected "
                                   f"{', '.join(ARRAYS)}")
            arrays = {}
            for name in ARRAYS:
                try:
                    arrays[name] = data[name]
                except ValueError as exc:  # object arrays need pickle
                    raise DatasetError(f"{path}: array {name!r} cannot be read without pickle ({exc}); expected a "
                                       "numeric array") from None
            return arrays
    except DatasetError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"{path}: not a readable .npz archive ({exc})") from None


def load(path, model, checkpoint=None, limit: int | None = None) -> EvaluationSet:
    """The utterances of an npz as the conformer's ``src`` (float32) and ``src_pad_mask`` (bool); no scorer."""
    path = expect_file(path, f"an .npz file with {', '.join(ARRAYS)}")
    arrays = read_arrays(path)
    src, mask = arrays["src"], arrays["src_pad_mask"]
    c = model.config
    src_shape = ("N", c.in_channels, c.feature_bins, c.frames)
    mask_shape = ("N", c.subsampled_frames)
    if src.ndim != 4 or src.shape[1:] != src_shape[1:]:
        raise DatasetError(f"{path}: array 'src' has shape {_shape(src.shape)}, expected {_shape(src_shape)} "
                           "(utterances, channels, mel bins, frames) for the model's config")
    if mask.ndim != 2 or mask.shape[1] != c.subsampled_frames:
        raise DatasetError(f"{path}: array 'src_pad_mask' has shape {_shape(mask.shape)}, expected "
                           f"{_shape(mask_shape)} (utterances, frames / 4 = {c.frames} / 4)")
    if len(src) != len(mask):
        raise DatasetError(f"{path}: 'src' has {len(src)} utterances, 'src_pad_mask' {len(mask)}")
    if len(src) == 0:
        raise DatasetError(f"{path}: no utterances (arrays 'src' and 'src_pad_mask' are empty)")
    if not np.issubdtype(src.dtype, np.floating):
        raise DatasetError(f"{path}: array 'src' has dtype {src.dtype}, expected float features")
    if mask.dtype != np.bool_:
        if not np.issubdtype(mask.dtype, np.integer) or not np.isin(mask, (0, 1)).all():
            raise DatasetError(f"{path}: array 'src_pad_mask' has dtype {mask.dtype}"
                               + ("" if not np.issubdtype(mask.dtype, np.integer) else " with values other than 0/1")
                               + ", expected bool (True = padded frame)")
    if limit is not None:
        src, mask = src[:limit], mask[:limit]
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
