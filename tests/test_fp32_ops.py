"""The FP32 reference ops' convolution and max pooling in every layout they choose (per-sample sgemms, the whole
batch in one sgemm, cache-sized tiles of whole samples or of rows of one sample), against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import sliding_window_view

import models.ops as ops
from models.ops import FP32, conv2d_fp32

U32 = 2.0 ** -24


def torch_conv(x, w, **kw):
    return torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                      **kw).numpy()


# (input shape, weight shape, options); each reaches another branch of conv2d_fp32 at the tile sizes below
CASES = [
    ((3, 8, 9, 11), (5, 8, 3, 3), dict(padding=1)),
    ((3, 8, 9, 11), (5, 8, 3, 3), dict(stride=2, padding=(1, 2), dilation=(2, 1))),
    ((2, 3, 15, 15), (4, 3, 7, 7), dict(stride=2, padding=3)),  # a stem
    ((4, 16, 5, 5), (8, 16, 1, 1), {}),  # 1x1, small output: the whole batch in one sgemm
    ((2, 16, 20, 20), (8, 16, 1, 1), dict(stride=2)),
    ((1, 8, 6, 7), (4, 8, 3, 3), dict(padding=1)),  # one sample
    ((2, 8, 6, 7), (8, 2, 3, 3), dict(padding=1, groups=4)),
]
# bytes per tile: every output pixel at once, several samples, one sample, two rows (a short last tile), one row
TILES = [1 << 30, 4 * 72 * 2 * 99, 4 * 72 * 99, 4 * 147 * 16, 1]


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("xs, ws, kw", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_conv2d_fp32_matches_torch_float64_in_every_tiling(monkeypatch, tile, xs, ws, kw):
    monkeypatch.setattr(ops, "_COLUMN_TILE_BYTES", tile)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    exact = torch_conv(x, w, **kw)
    bound = ws[1] * ws[2] * ws[3] * U32 * 1.01 * torch_conv(np.abs(x), np.abs(w), **kw)  # any FP32 order (Higham)
    y = conv2d_fp32(x, w, kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), kw.get("groups", 1))
    assert y.shape == exact.shape and y.dtype == np.float32 and y.flags.c_contiguous
    assert (np.abs(y - exact) <= bound).all()


def test_conv2d_fp32_tiles_split_pixels_only():
    """Tiling never splits the sum over C*kh*kw: the tiled results equal one untiled sgemm per sample bit for bit
    wherever every partial sum is exact (small integers)."""
    rng = np.random.default_rng(12)
    x = rng.integers(-8, 9, (3, 8, 9, 11)).astype(np.float32)
    w = rng.integers(-8, 9, (5, 8, 3, 3)).astype(np.float32)
    exact = torch_conv(x, w, padding=1).astype(np.float32)
    for tile in TILES:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ops, "_COLUMN_TILE_BYTES", tile)
            assert np.array_equal(conv2d_fp32(x, w, 1, 1), exact)


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), (2, 2, 0), ((3, 2), (1, 2), (1, 0))])
def test_max_pool2d_equals_the_window_maximum(kernel, stride, padding):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[0, 1, 4, 4] = np.nan
    x[1, 2] = -np.inf
    y = FP32.max_pool2d(x, kernel=kernel, stride=stride, padding=padding, name="pool")
    kh, kw = ops.as_pair(kernel)
    sh, sw = ops.as_pair(stride)
    ph, pw = ops.as_pair(padding)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    expected = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw].max(axis=(-2, -1))
    assert y.shape == expected.shape and y.dtype == np.float32
    np.testing.assert_array_equal(y, expected)  # NaN where a window holds one
    torch_y = torch.nn.functional.max_pool2d(torch.from_numpy(x), (kh, kw), (sh, sw), (ph, pw)).numpy()
    np.testing.assert_array_equal(y, torch_y)
