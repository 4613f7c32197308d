"""The ops interface every model computes through, and its FP32 numpy reference implementation.

A model never does arithmetic that a hardware's precision could change by itself: it calls the methods of the ops
object the backend hands it. Reshapes, transposes, slicing and gathers of index arrays are exact on any hardware and
stay in the model. Every method takes a keyword-only ``name``: the dotted name of the layer, spelled like the
checkpoint's parameter prefix (``bert.encoder.layer.3.attention.self.query``). Backends use names for per-op policies
(FP8 skip lists, per-tensor scales); a recorder sees every op's output under its name (per-layer error diagnosis).

Conventions: activations are float32 numpy arrays (a low-precision backend holds values on its grid in float32);
``linear`` weights are ``(out_features, in_features)`` as in torch; convolutions are NCHW with weights
``(out_channels, in_channels / groups, kh, kw)``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Recorder = Callable[[str, np.ndarray], None]

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


# erf(z) = z * P(z^2) / Q(z^2) for z clipped to [-4, 4] (erf is +-1 in float32 beyond): Eigen's/XLA's float32 erf.
# Evaluated in float32 its max abs error is 4.5e-7 (scipy's float64 erf rounded: 3e-8), at ~1/20 of scipy's cost.
_ERF_P = tuple(np.float32(c) for c in (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                                       -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                                       -1.60960333262415e-02))
_ERF_Q = tuple(np.float32(c) for c in (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                                       -7.37332916720468e-03, -1.42647390514189e-02))
_GELU_BLOCK = 1 << 15  # elements per block: the temporaries stay in cache


def gelu_fp32(x, approximate="none"):
    """GELU in float32, in blocks: ``0.5 x (1 + erf(x / sqrt 2))`` (``"none"``, BERT) or
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``"tanh"``, ALBERT's gelu_new)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    flat = np.ascontiguousarray(x, np.float32).reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, _GELU_BLOCK):
        v = flat[start: start + _GELU_BLOCK]
        if approximate == "tanh":
            t = v * np.float32(0.044715)
            t *= v
            t *= v
            t += v
            t *= _SQRT_2_OVER_PI
            np.tanh(t, out=t)
        else:
            t = v * np.float32(1 / np.sqrt(2))
            np.clip(t, np.float32(-4), np.float32(4), out=t)
            z2 = t * t
            p = np.full_like(t, _ERF_P[0])
            for c in _ERF_P[1:]:
                p *= z2
                p += c
            q = np.full_like(t, _ERF_Q[0])
            for c in _ERF_Q[1:]:
                q *= z2
                q += c
            t *= p
            t /= q
        t += np.float32(1)
        half = v * np.float32(0.5)
        np.multiply(half, t, out=out[start: start + _GELU_BLOCK])
    return out.reshape(np.shape(x))


def contiguous(x):
    """``np.ascontiguousarray`` for an activation between ops (numpy's matmul is ~10x faster on a C-contiguous
    array than on a strided view). Layout is not part of what a model computes, so anything that is not an ndarray (a
    graph recorder's symbolic tensor) passes unchanged."""
    return np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x


def sigmoid_fp32(x):
    """``1 / (1 + exp(-x))`` in float32 with numpy's vectorised exp (several times faster than scipy's expit); for
    x < -88.7 exp overflows to inf and the result is the exact limit 0."""
    with np.errstate(over="ignore"):
        e = np.exp(np.negative(x, dtype=np.float32))
    e += np.float32(1)
    return np.reciprocal(e, out=e)


def as_pair(v) -> tuple[int, int]:
    """An int or a pair of ints as a pair (unchecked: for validated arguments)."""
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


# Output pixels per sample (Ho * Wo) up to which a 1x1 conv2d_fp32 runs one sgemm for the whole batch: below it a
# per-sample sgemm is too narrow for BLAS to run at full speed (resnet50's 14x14 and 7x7 stages measured 1.1-1.5x
# faster batched); above it the per-sample sgemm is as fast and needs no transposes.
_BATCHED_PIXELS = 256
# Bytes of im2col columns gathered per sgemm of a kh x kw conv: the tile is still in cache when the sgemm reads it
# (whole-layer columns, written first and read after, ran resnet50's 3x3 convs 1.2-1.5x slower on one core).
_COLUMN_TILE_BYTES = 1 << 20


def conv2d_fp32(x, w, stride=1, padding=0, dilation=1, groups=1):
    """NCHW convolution in float32 as im2col sgemms ``W (O, C*kh*kw) @ cols (C*kh*kw, pixels)``, the columns gathered
    tap by tap straight into the sgemm's layout: kh x kw convs in cache-sized tiles of pixels (:func:`_conv2d_tiled`),
    1x1 convs with small outputs (``_BATCHED_PIXELS``) in one sgemm for the batch, other 1x1 and grouped convs in one
    sgemm per sample and group on the input itself; depthwise convs are a sum over kernel taps. Every layout sums each
    output's products over all of C*kh*kw in one sgemm."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = as_pair(stride)
    ph, pw = as_pair(padding)
    dh, dw = as_pair(dilation)
    if c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input has {c} channels, weight {tuple(w.shape)} with groups={groups} expects {cg * groups}")
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    ho = (x.shape[2] - eh) // sh + 1
    wo = (x.shape[3] - ew) // sw + 1
    if groups == c and cg == 1 and o == c and groups > 1:
        # channels last, so that each tap's per-channel weight runs along the contiguous axis
        xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # (N, H, W, C)
        wl = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))  # (kh, kw, C)
        out = np.zeros((n, ho, wo, c), np.float32)
        product = np.empty_like(out)
        for i in range(kh):
            for j in range(kw):
                tap = xl[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                np.multiply(tap, wl[i, j], out=product)
                out += product
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
    if groups == 1 and (kh * kw > 1 or (n > 1 and ho * wo <= _BATCHED_PIXELS)):
        budget = _COLUMN_TILE_BYTES if kh * kw > 1 else None
        return _conv2d_tiled(x, w, ho, wo, (sh, sw), (dh, dw), budget)
    if kh == 1 and kw == 1:
        cols = x[:, :, : sh * (ho - 1) + 1: sh, : sw * (wo - 1) + 1: sw]
        cols = np.ascontiguousarray(cols).reshape(n, groups, cg, ho * wo)  # (N, G, Cg, Ho*Wo)
    else:
        cols = np.empty((n, c, kh, kw, ho, wo), np.float32)
        for i in range(kh):
            for j in range(kw):
                cols[:, :, i, j] = x[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
        cols = cols.reshape(n, groups, cg * kh * kw, ho * wo)  # (N, G, Cg*kh*kw, Ho*Wo)
    wg = w.reshape(groups, o // groups, cg * kh * kw)  # (G, O/G, Cg*kh*kw)
    out = np.empty((n, groups, o // groups, ho * wo), np.float32)
    for b in range(n):  # one sgemm each: a broadcast matmul would not call BLAS
        for g in range(groups):
            np.matmul(wg[g], cols[b, g], out=out[b, g])
    return out.reshape(n, o, ho, wo)


def _conv2d_tiled(x, w, ho, wo, stride, dilation, budget):
    """The ungrouped conv2d_fp32 of an already padded ``x`` as sgemms ``W (O, C*kh*kw) @ cols (C*kh*kw, P)`` over
    tiles of P output pixels whose columns fill about ``budget`` bytes (None: the whole batch at once): several
    whole samples per tile, gathered from the (C, N, H, W) view with the result moved back to NCHW, or rows of one
    sample written straight into its output. The tiling splits the pixels only, never the sum over C*kh*kw."""
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    k = c * kh * kw
    wm = w.reshape(o, k)
    out = np.empty((n, o, ho, wo), np.float32)
    pixels = n * ho * wo if budget is None else max(wo, budget // (4 * k))
    buffer = np.empty(k * min(pixels, n * ho * wo), np.float32)
    if ho * wo <= pixels:  # whole samples per tile
        step = min(n, pixels // (ho * wo))
        xt = x.transpose(1, 0, 2, 3)  # (C, N, H, W), a view
        for s0 in range(0, n, step):
            s1 = min(n, s0 + step)
            cols = buffer[: k * (s1 - s0) * ho * wo].reshape(c, kh, kw, s1 - s0, ho, wo)
            for i in range(kh):
                for j in range(kw):
                    cols[:, i, j] = xt[:, s0:s1, i * dh: i * dh + sh * (ho - 1) + 1: sh,
                                       j * dw: j * dw + sw * (wo - 1) + 1: sw]
            y = np.matmul(wm, cols.reshape(k, -1))  # (O, samples * Ho * Wo)
            out[s0:s1].transpose(1, 0, 2, 3)[...] = y.reshape(o, s1 - s0, ho, wo)
        return out
    rows = pixels // wo  # output rows of one sample per tile
    for b in range(n):
        ob = out[b].reshape(o, ho * wo)
        for r0 in range(0, ho, rows):
            r1 = min(ho, r0 + rows)
            cols = buffer[: k * (r1 - r0) * wo].reshape(c, kh, kw, r1 - r0, wo)
            for i in range(kh):
                for j in range(kw):
                    cols[:, i, j] = x[b, :, r0 * sh + i * dh: (r1 - 1) * sh + i * dh + 1: sh,
                                      j * dw: j * dw + sw * (wo - 1) + 1: sw]
            np.matmul(wm, cols.reshape(k, -1), out=ob[:, r0 * wo: r1 * wo])
    return out


def cumsum_fp32(x, axis, exclusive=False, reverse=False):
    """ONNX's CumSum in float32 along ``axis``."""
    x = np.asarray(x, np.float32)
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=np.float32)
    if exclusive:
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.take(y, range(y.shape[axis] - 1), axis=axis)],
                           axis=axis)
    return np.ascontiguousarray(np.flip(y, axis) if reverse else y)


def instance_norm_fp32(x, gamma, beta, eps):
    """InstanceNorm of NC... ``x`` over its spatial axes, in float32."""
    x = np.asarray(x, np.float32)
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
    centred = x - mean
    var = np.mean(centred * centred, axis=axes, keepdims=True, dtype=np.float32)
    y = centred / np.sqrt(var + np.float32(eps)) * np.asarray(gamma, np.float32).reshape(shape)
    return (y + np.asarray(beta, np.float32).reshape(shape)).astype(np.float32, copy=False)


def interpolate_fp32(x, rows, cols):
    """``rows @ x @ cols.T`` over the last two axes of ``x``, in float32."""
    y = np.matmul(np.asarray(rows, np.float32), np.asarray(x, np.float32))
    return np.ascontiguousarray(np.matmul(y, np.asarray(cols, np.float32).T))


def window_sums(x, kernel, stride):
    """The FP32 sum of each (kh, kw) window of NCHW ``x`` at ``stride``."""
    kh, kw = as_pair(kernel)
    sh, sw = as_pair(stride)
    win = sliding_window_view(np.asarray(x, np.float32), (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.sum(axis=(-2, -1), dtype=np.float32)


def window_max(x, kernel, stride):
    """The maximum of each (kh, kw) window of NCHW ``x`` at ``stride``: a running maximum over the kernel's taps,
    each a strided view of ``x`` (the same values as a reduction over the windows, at the cost of kh*kw passes)."""
    kh, kw = kernel
    sh, sw = stride
    ho = (x.shape[2] - kh) // sh + 1
    wo = (x.shape[3] - kw) // sw + 1
    out = None
    for i in range(kh):
        for j in range(kw):
            tap = x[:, :, i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw]
            out = np.array(tap) if out is None else np.maximum(out, tap, out=out)
    return out


def sample_values(x, count: int) -> np.ndarray:
    """Up to ``count`` values of an op's output ``x`` (float32, flattened), for recorders and observers that must not
    hold whole activations: positions drawn once per size, seeded, so two tensors of one shape are sampled at the same
    positions. A strided subsample would alias with the feature axis (a stride of 48 over rows of 384 features sees 8
    of them) and miss the outlier features that decide a quantization scale or an error profile."""
    flat = np.asarray(x, np.float32).reshape(-1)
    if flat.size <= count:
        return flat.copy()
    return flat[_positions(flat.size, count)]


_POSITIONS: dict[tuple[int, int], np.ndarray] = {}


def _positions(size: int, count: int) -> np.ndarray:
    key = (size, count)
    if key not in _POSITIONS:
        _POSITIONS[key] = np.sort(np.random.default_rng([size, count]).choice(size, count, replace=False))
    return _POSITIONS[key]


class Ops:
    """FP32 reference ops. Subclasses change the precision; models only call these methods."""

    precision = "fp32"

    def __init__(self, recorder: Recorder | None = None):
        self.recorder = recorder

    def _emit(self, name: str, y: np.ndarray) -> np.ndarray:
        """Every op's result passes here: the hook for recorders (per-layer diagnosis)."""
        if self.recorder is not None:
            self.recorder(name, y)
        return y

    # -- data entering the device ------------------------------------------------------------------------------
    def input(self, x, *, name):
        """A float input as the device holds it (e.g. pixel values, numeric features)."""
        return self._emit(name, np.asarray(x, np.float32))

    def embedding(self, table, ids, *, name):
        """Rows of ``table`` (vocab, dim) at integer ``ids``: a Gather."""
        return self._emit(name, np.take(table, ids, axis=0))

    # -- matrix units ----------------------------------------------------------------------------------------------
    def linear(self, x, weight, bias=None, *, name):
        """``x @ weight.T + bias`` over the last axis; weight is (out, in). A MatMul/Gemm with a weight operand."""
        lead = x.shape[:-1]
        y = x.reshape(-1, x.shape[-1]) @ weight.T
        if bias is not None:
            y += bias
        return self._emit(name, y.reshape(*lead, weight.shape[0]))

    def matmul(self, a, b, *, name):
        """Batched ``a @ b`` of two activations (attention scores, attention-weighted values)."""
        return self._emit(name, np.matmul(a, b))

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        """NCHW convolution; weight (O, C/groups, kh, kw)."""
        y = conv2d_fp32(x, weight, stride, padding, dilation, groups)
        if bias is not None:
            y += bias.reshape(1, -1, 1, 1)
        return self._emit(name, y)

    # -- elementwise -------------------------------------------------------------------------------------------
    def add(self, a, b, *, name):
        return self._emit(name, np.add(a, b, dtype=np.float32))

    def sub(self, a, b, *, name):
        return self._emit(name, np.subtract(a, b, dtype=np.float32))

    def mul(self, a, b, *, name):
        return self._emit(name, np.multiply(a, b, dtype=np.float32))

    def div(self, a, b, *, name):
        """``a / b`` elementwise (a normalisation by a computed statistic; a division by a constant is a ``mul``)."""
        return self._emit(name, np.divide(a, b, dtype=np.float32))

    def sqrt(self, x, *, name):
        return self._emit(name, np.sqrt(np.asarray(x, np.float32)))

    def pow(self, x, exponent: float, *, name):
        """``x ** exponent`` for a constant scalar ``exponent`` (a variance's square, an RMS norm)."""
        return self._emit(name, np.power(np.asarray(x, np.float32), np.float32(exponent)))

    def relu(self, x, *, name):
        return self._emit(name, np.maximum(x, np.float32(0)))

    def gelu(self, x, *, approximate="none", name):
        """GELU: ``"none"`` is the erf form (BERT), ``"tanh"`` the tanh approximation (ALBERT's gelu_new)."""
        return self._emit(name, gelu_fp32(x, approximate))

    def sigmoid(self, x, *, name):
        return self._emit(name, sigmoid_fp32(x))

    def silu(self, x, *, name):
        return self._emit(name, np.multiply(x, sigmoid_fp32(x), dtype=np.float32))

    def tanh(self, x, *, name):
        return self._emit(name, np.tanh(x))

    def glu(self, x, *, axis, name):
        """Gated linear unit: first half times sigmoid of the second half along ``axis``."""
        a, b = np.split(x, 2, axis=axis)
        return self._emit(name, np.multiply(a, sigmoid_fp32(b), dtype=np.float32))

    # -- normalisation and reductions --------------------------------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        """LayerNorm over the last axis, statistics in FP32."""
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        var = np.mean(centred * centred, axis=-1, keepdims=True)
        y = centred / np.sqrt(var + np.float32(eps)) * gamma + beta
        return self._emit(name, y.astype(np.float32, copy=False))

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        """Inference BatchNorm with running statistics along channel ``axis``."""
        shape = [1] * x.ndim
        shape[axis] = -1
        inv = (gamma / np.sqrt(var + np.float32(eps))).astype(np.float32)
        shift = (beta - mean * inv).astype(np.float32)
        y = np.multiply(x, inv.reshape(shape), dtype=np.float32)
        y += shift.reshape(shape)  # in place: the same sum without a second temporary
        return self._emit(name, y)

    def softmax(self, x, *, axis=-1, name):
        """Numerically stable softmax, statistics in FP32."""
        e = np.subtract(x, x.max(axis=axis, keepdims=True), dtype=np.float32)
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True)
        return self._emit(name, e)

    def mean(self, x, *, axis, keepdims=False, name):
        return self._emit(name, x.mean(axis=axis, keepdims=keepdims, dtype=np.float32))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        """NCHW max pooling; padding is -inf as in torch."""
        kh, kw = as_pair(kernel)
        sh, sw = as_pair(stride)
        ph, pw = as_pair(padding)
        if ph or pw:
            x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
        return self._emit(name, window_max(x, (kh, kw), (sh, sw)))

    # -- further elementwise ops, norms and pooling (of imported graphs) -----------------------------------------
    def maximum(self, a, b, *, name):
        return self._emit(name, np.maximum(a, b, dtype=np.float32))

    def minimum(self, a, b, *, name):
        return self._emit(name, np.minimum(a, b, dtype=np.float32))

    def abs(self, x, *, name):
        return self._emit(name, np.abs(np.asarray(x, np.float32)))

    def neg(self, x, *, name):
        return self._emit(name, np.negative(np.asarray(x, np.float32)))

    def sign(self, x, *, name):
        return self._emit(name, np.sign(np.asarray(x, np.float32)))

    def ceil(self, x, *, name):
        return self._emit(name, np.ceil(np.asarray(x, np.float32)))

    def floor(self, x, *, name):
        return self._emit(name, np.floor(np.asarray(x, np.float32)))

    def exp(self, x, *, name):
        with np.errstate(over="ignore"):
            return self._emit(name, np.exp(np.asarray(x, np.float32)))

    def log(self, x, *, name):
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._emit(name, np.log(np.asarray(x, np.float32)))

    def reciprocal(self, x, *, name):
        with np.errstate(divide="ignore"):
            return self._emit(name, np.reciprocal(np.asarray(x, np.float32)))

    def clip(self, x, low=None, high=None, *, name):
        """``x`` limited to [``low``, ``high``] (scalars; None: no bound)."""
        y = np.asarray(x, np.float32)
        if low is not None:
            y = np.maximum(y, np.float32(low))
        if high is not None:
            y = np.minimum(y, np.float32(high))
        return self._emit(name, np.array(y, np.float32))

    def mod(self, a, b, *, name):
        """C's ``fmod``: the remainder with the sign of ``a`` (ONNX's Mod of floats, ``fmod=1``)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._emit(name, np.fmod(a, b, dtype=np.float32))

    def hard_sigmoid(self, x, *, alpha, beta, name):
        """``max(0, min(1, alpha x + beta))``."""
        y = np.asarray(x, np.float32) * np.float32(alpha) + np.float32(beta)
        return self._emit(name, np.clip(y, np.float32(0), np.float32(1)))

    def hard_swish(self, x, *, name):
        """``x * max(0, min(1, x / 6 + 1 / 2))``."""
        x = np.asarray(x, np.float32)
        return self._emit(name, x * np.clip(x * np.float32(1 / 6) + np.float32(0.5), np.float32(0), np.float32(1)))

    def sum(self, x, *, axis, keepdims=False, name):
        """The sum over ``axis`` (a ReduceSum), accumulated in FP32."""
        return self._emit(name, np.asarray(np.sum(x, axis=axis, keepdims=keepdims, dtype=np.float32)))

    def cumsum(self, x, *, axis, exclusive=False, reverse=False, name):
        """Running sum along ``axis`` (``exclusive``: without the element itself; ``reverse``: from the end)."""
        return self._emit(name, cumsum_fp32(x, axis, exclusive, reverse))

    def instance_norm(self, x, gamma, beta, *, eps, name):
        """InstanceNorm: each (sample, channel) normalised over its spatial axes (NC...), statistics in FP32, then
        scaled and shifted per channel."""
        y = instance_norm_fp32(x, gamma, beta, eps)
        return self._emit(name, y)

    def interpolate(self, x, rows, cols, *, name):
        """A linear resize of NCHW ``x``: ``rows (Ho, H) @ x @ cols (Wo, W).T``, the interpolation weights of each
        output row and column (a bilinear upsampling), summed in FP32."""
        return self._emit(name, interpolate_fp32(x, rows, cols))

    def avg_pool2d(self, x, divisor, *, kernel, stride, name):
        """NCHW average pooling of an already padded ``x``: each window's sum over ``divisor`` (Ho, Wo), the count of
        the window's elements that are averaged (padding counted or not)."""
        return self._emit(name, (window_sums(x, kernel, stride) / np.asarray(divisor, np.float32)).astype(np.float32))


FP32 = Ops()
