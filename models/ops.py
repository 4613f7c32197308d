"""The ops interface every model computes through, and its FP32 numpy reference implementation.

A model never does arithmetic that a hardware's precision could change by itself: it calls the methods of the ops
object the backend hands it. Reshapes, transposes, slicing and gathers of index arrays are exact on any hardware and
stay in the model. Every method takes a keyword-only ``name``: the dotted name of the layer, spelled like the
checkpoint's parameter prefix (``bert.encoder.layer.3.attention.self.query``). Backends use names for per-op policies
(FP8 skip lists, per-tensor scales); a recorder sees every op's output under its name (per-layer error diagnosis).

Conventions: activations are float32 arrays, numpy's (the reference, and what a hardware's ops take) or another array
API library's (:class:`Ops` computes in the library of its operands; a low-precision backend holds values on its grid
in float32);
``linear`` weights are ``(out_features, in_features)`` as in torch; convolutions are NCHW with weights
``(out_channels, in_channels / groups, kh, kw)``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from models import arrays, blas
from models.arrays import common

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
    graph recorder's symbolic tensor) passes unchanged, and so does an array of one value broadcast (every stride 0:
    a timing trace's placeholder), which a copy would only make large."""
    if not isinstance(x, np.ndarray) or (x.ndim and not any(x.strides)):
        return x
    return np.ascontiguousarray(x)


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
            blas.matmul(wg[g], cols[b, g], out=out[b, g])
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
            y = blas.matmul(wm, cols.reshape(k, -1))  # (O, samples * Ho * Wo)
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
            blas.matmul(wm, cols.reshape(k, -1), out=ob[:, r0 * wo: r1 * wo])
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
    """FP32 reference ops. Subclasses change the precision; models only call these methods.

    Each method computes in the library of its operands (:func:`models.arrays.namespace`): numpy arrays with the
    numpy kernels of this module, the reference (what a hardware is judged against); arrays of another array API
    library (torch tensors, on the CPU or a GPU) with the standard's functions and :mod:`models.arrays`, the result an
    array of that library on the operands' device (numpy operands, such as weights, are moved there; a model moves its
    parameters once, see :meth:`models.base.Model.params_like`). FP32 throughout; on another library the sums run in
    its order, so results agree with numpy's within FP32 rounding, not bit for bit."""

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
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, np.asarray(x, np.float32))
        return self._emit(name, xp.astype(x, xp.float32, copy=False))

    def embedding(self, table, ids, *, name):
        """Rows of ``table`` (vocab, dim) at integer ``ids``: a Gather."""
        xp, (table, ids) = common(table, ids)
        if xp is np:
            return self._emit(name, np.take(table, ids, axis=0))
        rows = xp.take(table, xp.reshape(ids, (-1,)), axis=0)  # the standard's take: 1-d indices
        return self._emit(name, xp.reshape(rows, (*ids.shape, *table.shape[1:])))

    # -- matrix units ----------------------------------------------------------------------------------------------
    def linear(self, x, weight, bias=None, *, name):
        """``x @ weight.T + bias`` over the last axis; weight is (out, in). A MatMul/Gemm with a weight operand."""
        xp, (x, weight, bias) = common(x, weight, bias)
        lead = x.shape[:-1]
        rows, columns = xp.reshape(x, (-1, x.shape[-1])), xp.permute_dims(weight, (1, 0))
        y = blas.matmul(rows, columns) if xp is np else rows @ columns
        if bias is not None:
            y += bias
        return self._emit(name, xp.reshape(y, (*lead, weight.shape[0])))

    def matmul(self, a, b, *, name):
        """Batched ``a @ b`` of two activations (attention scores, attention-weighted values)."""
        xp, (a, b) = common(a, b)
        return self._emit(name, blas.matmul(a, b) if xp is np else xp.matmul(a, b))

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        """NCHW convolution; weight (O, C/groups, kh, kw)."""
        xp, (x, weight, bias) = common(x, weight, bias)
        if xp is np:
            y = conv2d_fp32(x, weight, stride, padding, dilation, groups)
        else:
            y = arrays.conv2d(x, weight, as_pair(stride), as_pair(padding), as_pair(dilation), groups)
        if bias is not None:
            y += xp.reshape(bias, (1, -1, 1, 1))
        return self._emit(name, y)

    # -- elementwise -------------------------------------------------------------------------------------------
    def add(self, a, b, *, name):
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.add(a, b, dtype=np.float32))
        return self._emit(name, _float32(xp, xp.add(a, b)))

    def sub(self, a, b, *, name):
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.subtract(a, b, dtype=np.float32))
        return self._emit(name, _float32(xp, xp.subtract(a, b)))

    def mul(self, a, b, *, name):
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.multiply(a, b, dtype=np.float32))
        return self._emit(name, _float32(xp, xp.multiply(a, b)))

    def div(self, a, b, *, name):
        """``a / b`` elementwise (a normalisation by a computed statistic; a division by a constant is a ``mul``)."""
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.divide(a, b, dtype=np.float32))
        return self._emit(name, _float32(xp, xp.divide(a, b)))

    def sqrt(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.sqrt(_as_float32(xp, x)))

    def pow(self, x, exponent: float, *, name):
        """``x ** exponent`` for a constant scalar ``exponent`` (a variance's square, an RMS norm)."""
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, np.power(np.asarray(x, np.float32), np.float32(exponent)))
        return self._emit(name, xp.pow(_as_float32(xp, x), float(exponent)))

    def relu(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, np.maximum(x, np.float32(0)))
        return self._emit(name, arrays.relu(x))  # numpy's maximum's bits: NaN kept, -0.0 to +0.0

    def gelu(self, x, *, approximate="none", name):
        """GELU: ``"none"`` is the erf form (BERT), ``"tanh"`` the tanh approximation (ALBERT's gelu_new)."""
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, gelu_fp32(x, approximate))
        return self._emit(name, _gelu(xp, x, approximate))

    def sigmoid(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, sigmoid_fp32(x))
        return self._emit(name, _sigmoid(xp, x))

    def silu(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, np.multiply(x, sigmoid_fp32(x), dtype=np.float32))
        return self._emit(name, x * _sigmoid(xp, x))

    def tanh(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.tanh(x))

    def glu(self, x, *, axis, name):
        """Gated linear unit: first half times sigmoid of the second half along ``axis``."""
        xp, (x,) = common(x)
        if xp is np:
            a, b = np.split(x, 2, axis=axis)
            return self._emit(name, np.multiply(a, sigmoid_fp32(b), dtype=np.float32))
        half = x.shape[axis] // 2
        a, b = (_take_range(x, axis, start, start + half) for start in (0, half))
        return self._emit(name, a * _sigmoid(xp, b))

    # -- normalisation and reductions --------------------------------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        """LayerNorm over the last axis, statistics in FP32."""
        xp, (x, gamma, beta) = common(x, gamma, beta)
        if xp is np:
            mean = x.mean(axis=-1, keepdims=True)
            centred = x - mean
            var = np.mean(centred * centred, axis=-1, keepdims=True)
            y = centred / np.sqrt(var + np.float32(eps)) * gamma + beta
            return self._emit(name, y.astype(np.float32, copy=False))
        centred = x - xp.mean(x, axis=-1, keepdims=True)
        var = xp.mean(centred * centred, axis=-1, keepdims=True)
        return self._emit(name, centred / xp.sqrt(var + float(np.float32(eps))) * gamma + beta)

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        """Inference BatchNorm with running statistics along channel ``axis``."""
        xp, (x, mean, var, gamma, beta) = common(x, mean, var, gamma, beta)
        shape = [1] * x.ndim
        shape[axis] = -1
        if xp is np:
            inv = (gamma / np.sqrt(var + np.float32(eps))).astype(np.float32)
            shift = (beta - mean * inv).astype(np.float32)
            y = np.multiply(x, inv.reshape(shape), dtype=np.float32)
            y += shift.reshape(shape)  # in place: the same sum without a second temporary
            return self._emit(name, y)
        inv = gamma / xp.sqrt(var + float(np.float32(eps)))
        shift = beta - mean * inv
        return self._emit(name, x * xp.reshape(inv, tuple(shape)) + xp.reshape(shift, tuple(shape)))

    def softmax(self, x, *, axis=-1, name):
        """Numerically stable softmax, statistics in FP32."""
        xp, (x,) = common(x)
        if xp is np:
            e = np.subtract(x, x.max(axis=axis, keepdims=True), dtype=np.float32)
            np.exp(e, out=e)
            e /= e.sum(axis=axis, keepdims=True)
            return self._emit(name, e)
        e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
        return self._emit(name, e / xp.sum(e, axis=axis, keepdims=True))

    def mean(self, x, *, axis, keepdims=False, name):
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, x.mean(axis=axis, keepdims=keepdims, dtype=np.float32))
        return self._emit(name, xp.mean(x, axis=axis, keepdims=keepdims))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        """NCHW max pooling; padding is -inf as in torch."""
        xp, (x,) = common(x)
        kh, kw = as_pair(kernel)
        sh, sw = as_pair(stride)
        ph, pw = as_pair(padding)
        if xp is np:
            if ph or pw:
                x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
            return self._emit(name, window_max(x, (kh, kw), (sh, sw)))
        if ph or pw:
            x = arrays.pad2d(x, ph, pw, -float("inf"))
        y = None
        for tap in _window_taps(x, (kh, kw), (sh, sw)):
            y = tap if y is None else xp.maximum(y, tap)
        return self._emit(name, y)

    # -- further elementwise ops, norms and pooling (of imported graphs) -----------------------------------------
    def maximum(self, a, b, *, name):
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.maximum(a, b, dtype=np.float32))
        return self._emit(name, xp.maximum(*_arrays_like(xp, a, b)))

    def minimum(self, a, b, *, name):
        xp, (a, b) = common(a, b)
        if xp is np:
            return self._emit(name, np.minimum(a, b, dtype=np.float32))
        return self._emit(name, xp.minimum(*_arrays_like(xp, a, b)))

    def abs(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.abs(_as_float32(xp, x)))

    def neg(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.negative(_as_float32(xp, x)))

    def sign(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.sign(_as_float32(xp, x)))

    def ceil(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.ceil(_as_float32(xp, x)))

    def floor(self, x, *, name):
        xp, (x,) = common(x)
        return self._emit(name, xp.floor(_as_float32(xp, x)))

    def exp(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            with np.errstate(over="ignore"):
                return self._emit(name, np.exp(np.asarray(x, np.float32)))
        return self._emit(name, xp.exp(_as_float32(xp, x)))

    def log(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            with np.errstate(divide="ignore", invalid="ignore"):
                return self._emit(name, np.log(np.asarray(x, np.float32)))
        return self._emit(name, xp.log(_as_float32(xp, x)))

    def reciprocal(self, x, *, name):
        xp, (x,) = common(x)
        if xp is np:
            with np.errstate(divide="ignore"):
                return self._emit(name, np.reciprocal(np.asarray(x, np.float32)))
        return self._emit(name, 1.0 / _as_float32(xp, x))

    def clip(self, x, low=None, high=None, *, name):
        """``x`` limited to [``low``, ``high``] (scalars; None: no bound)."""
        xp, (x,) = common(x)
        if xp is np:
            y = np.asarray(x, np.float32)
            if low is not None:
                y = np.maximum(y, np.float32(low))
            if high is not None:
                y = np.minimum(y, np.float32(high))
            return self._emit(name, np.array(y, np.float32))
        y = _as_float32(xp, x)
        if low is not None:
            y = xp.where(y < float(np.float32(low)), float(np.float32(low)), y)  # numpy's maximum: NaN stays
        if high is not None:
            y = xp.where(y > float(np.float32(high)), float(np.float32(high)), y)
        return self._emit(name, y)

    def mod(self, a, b, *, name):
        """C's ``fmod``: the remainder with the sign of ``a`` (ONNX's Mod of floats, ``fmod=1``)."""
        xp, (a, b) = common(a, b)
        if xp is np:
            with np.errstate(invalid="ignore", divide="ignore"):
                return self._emit(name, np.fmod(a, b, dtype=np.float32))
        return self._emit(name, arrays.fmod(*_arrays_like(xp, a, b)))

    def hard_sigmoid(self, x, *, alpha, beta, name):
        """``max(0, min(1, alpha x + beta))``."""
        xp, (x,) = common(x)
        if xp is np:
            y = np.asarray(x, np.float32) * np.float32(alpha) + np.float32(beta)
            return self._emit(name, np.clip(y, np.float32(0), np.float32(1)))
        y = _as_float32(xp, x) * float(np.float32(alpha)) + float(np.float32(beta))
        return self._emit(name, xp.clip(y, 0.0, 1.0))

    def hard_swish(self, x, *, name):
        """``x * max(0, min(1, x / 6 + 1 / 2))``."""
        xp, (x,) = common(x)
        if xp is np:
            x = np.asarray(x, np.float32)
            return self._emit(name, x * np.clip(x * np.float32(1 / 6) + np.float32(0.5), np.float32(0), np.float32(1)))
        x = _as_float32(xp, x)
        return self._emit(name, x * xp.clip(x * float(np.float32(1 / 6)) + 0.5, 0.0, 1.0))

    def sum(self, x, *, axis, keepdims=False, name):
        """The sum over ``axis`` (a ReduceSum), accumulated in FP32."""
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, np.asarray(np.sum(x, axis=axis, keepdims=keepdims, dtype=np.float32)))
        return self._emit(name, xp.sum(_as_float32(xp, x), axis=axis, keepdims=keepdims))

    def cumsum(self, x, *, axis, exclusive=False, reverse=False, name):
        """Running sum along ``axis`` (``exclusive``: without the element itself; ``reverse``: from the end)."""
        xp, (x,) = common(x)
        if xp is np:
            return self._emit(name, cumsum_fp32(x, axis, exclusive, reverse))
        x = _as_float32(xp, x)
        if reverse:
            x = xp.flip(x, axis=axis)
        y = xp.cumulative_sum(x, axis=axis)
        if exclusive:
            zero = xp.zeros_like(_take_range(y, axis, 0, 1))
            y = xp.concat([zero, _take_range(y, axis, 0, y.shape[axis] - 1)], axis=axis)
        return self._emit(name, xp.flip(y, axis=axis) if reverse else y)

    def instance_norm(self, x, gamma, beta, *, eps, name):
        """InstanceNorm: each (sample, channel) normalised over its spatial axes (NC...), statistics in FP32, then
        scaled and shifted per channel."""
        xp, (x, gamma, beta) = common(x, gamma, beta)
        if xp is np:
            return self._emit(name, instance_norm_fp32(x, gamma, beta, eps))
        x = _as_float32(xp, x)
        axes = tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        centred = x - xp.mean(x, axis=axes, keepdims=True)
        var = xp.mean(centred * centred, axis=axes, keepdims=True)
        y = centred / xp.sqrt(var + float(np.float32(eps))) * xp.reshape(_as_float32(xp, gamma), shape)
        return self._emit(name, y + xp.reshape(_as_float32(xp, beta), shape))

    def interpolate(self, x, rows, cols, *, name):
        """A linear resize of NCHW ``x``: ``rows (Ho, H) @ x @ cols (Wo, W).T``, the interpolation weights of each
        output row and column (a bilinear upsampling), summed in FP32."""
        xp, (x, rows, cols) = common(x, rows, cols)
        if xp is np:
            return self._emit(name, interpolate_fp32(x, rows, cols))
        y = xp.matmul(_as_float32(xp, rows), _as_float32(xp, x))
        return self._emit(name, xp.matmul(y, xp.matrix_transpose(_as_float32(xp, cols))))

    def avg_pool2d(self, x, divisor, *, kernel, stride, name):
        """NCHW average pooling of an already padded ``x``: each window's sum over ``divisor`` (Ho, Wo), the count of
        the window's elements that are averaged (padding counted or not)."""
        xp, (x, divisor) = common(x, divisor)
        if xp is np:
            return self._emit(name, (window_sums(x, kernel, stride) / np.asarray(divisor, np.float32)).astype(np.float32))
        total = None
        for tap in _window_taps(_as_float32(xp, x), as_pair(kernel), as_pair(stride)):
            total = tap if total is None else total + tap
        return self._emit(name, total / _as_float32(xp, divisor))


# -- the array API path's pieces (numpy has its kernels above) ----------------------------------------------------------
def _as_float32(xp, x):
    """``x`` as float32 (itself when it is)."""
    return np.asarray(x, np.float32) if xp is np else xp.astype(x, xp.float32, copy=False)


def _window_taps(x, kernel, stride):
    """The strided slices of NCHW ``x``, one per (kh, kw) kernel tap: tap (i, j) holds element (i, j) of every
    window at ``stride``."""
    (kh, kw), (sh, sw) = kernel, stride
    ho = (x.shape[2] - kh) // sh + 1
    wo = (x.shape[3] - kw) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield x[:, :, i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw]


def _float32(xp, y):
    """The result of an elementwise op as float32 (an integer or float64 operand may have promoted it)."""
    return y if y.dtype == xp.float32 else xp.astype(y, xp.float32)


def _arrays_like(xp, a, b):
    """``a`` and ``b`` as float32 arrays of ``xp`` (a Python scalar becomes a 0-d array beside the other)."""
    like = b if isinstance(a, (int, float)) else a
    return tuple(_as_float32(xp, arrays.asarray_like(np.float32(v), like) if isinstance(v, (int, float)) else v)
                 for v in (a, b))


def _take_range(x, axis: int, start: int, stop: int):
    """``x[start:stop]`` along ``axis``."""
    key = [slice(None)] * x.ndim
    key[axis] = slice(start, stop)
    return x[tuple(key)]


def _sigmoid(xp, x):
    """``1 / (1 + exp(-x))`` in float32; for x < -88.7 exp overflows to inf and the result is the exact limit 0."""
    return 1.0 / (xp.exp(-x) + 1.0)


def _gelu(xp, x, approximate: str):
    """:func:`gelu_fp32`'s float32 arithmetic, step by step, in the standard's functions."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "tanh":
        t = x * float(np.float32(0.044715)) * x * x + x
        t = xp.tanh(t * float(_SQRT_2_OVER_PI))
    else:
        t = xp.clip(x * float(np.float32(1 / np.sqrt(2))), -4.0, 4.0)
        z2 = t * t
        p = xp.full_like(t, float(_ERF_P[0]))
        for c in _ERF_P[1:]:
            p = p * z2 + float(c)
        q = xp.full_like(t, float(_ERF_Q[0]))
        for c in _ERF_Q[1:]:
            q = q * z2 + float(c)
        t = t * p / q
    return x * 0.5 * (t + 1.0)


FP32 = Ops()
