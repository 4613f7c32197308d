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
from scipy import special

Recorder = Callable[[str, np.ndarray], None]

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


def conv2d_fp32(x, w, stride=1, padding=0, dilation=1, groups=1):
    """NCHW convolution in float32 via im2col and sgemm (depthwise: a sum over kernel taps)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input has {c} channels, weight {tuple(w.shape)} with groups={groups} expects {cg * groups}")
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    ho = (x.shape[2] - eh) // sh + 1
    wo = (x.shape[3] - ew) // sw + 1
    if kh == 1 and kw == 1 and groups == 1:
        xs = x[:, :, ::sh, ::sw][:, :, :ho, :wo]
        out = w.reshape(o, c) @ xs.reshape(n, c, ho * wo)  # (N, O, Ho*Wo)
        return np.ascontiguousarray(out.reshape(n, o, ho, wo), dtype=np.float32)
    if groups == c and cg == 1 and o == c:
        out = np.zeros((n, c, ho, wo), np.float32)
        for i in range(kh):
            for j in range(kw):
                tap = x[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                out += tap * w[None, :, 0, i, j, None, None]
        return out
    win = sliding_window_view(x, (eh, ew), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :ho, :wo]
    # (N, C, Ho, Wo, kh, kw) -> (G, N*Ho*Wo, Cg*kh*kw)
    cols = win.reshape(n, groups, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * ho * wo, cg * kh * kw)
    wg = w.reshape(groups, o // groups, cg * kh * kw)
    out = cols @ wg.transpose(0, 2, 1)  # (G, N*Ho*Wo, O/G)
    out = out.reshape(groups, n, ho, wo, o // groups).transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)
    return np.ascontiguousarray(out, dtype=np.float32)


class Ops:
    """FP32 reference ops (the ``cpu`` hardware). Subclasses change the precision; models only call these methods."""

    hardware = "cpu"
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

    def relu(self, x, *, name):
        return self._emit(name, np.maximum(x, np.float32(0)))

    def gelu(self, x, *, approximate="none", name):
        """GELU: ``"none"`` is the erf form (BERT), ``"tanh"`` the tanh approximation (ALBERT's gelu_new)."""
        if approximate == "tanh":
            y = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))
        elif approximate == "none":
            y = 0.5 * x * (1.0 + special.erf(x * np.float32(1 / np.sqrt(2))))
        else:
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return self._emit(name, y.astype(np.float32, copy=False))

    def sigmoid(self, x, *, name):
        return self._emit(name, special.expit(x).astype(np.float32, copy=False))

    def silu(self, x, *, name):
        return self._emit(name, (x * special.expit(x)).astype(np.float32, copy=False))

    def tanh(self, x, *, name):
        return self._emit(name, np.tanh(x))

    def glu(self, x, *, axis, name):
        """Gated linear unit: first half times sigmoid of the second half along ``axis``."""
        a, b = np.split(x, 2, axis=axis)
        return self._emit(name, (a * special.expit(b)).astype(np.float32, copy=False))

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
        return self._emit(name, x * inv.reshape(shape) + shift.reshape(shape))

    def softmax(self, x, *, axis=-1, name):
        """Numerically stable softmax, statistics in FP32."""
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return self._emit(name, e)

    def mean(self, x, *, axis, keepdims=False, name):
        return self._emit(name, x.mean(axis=axis, keepdims=keepdims, dtype=np.float32))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        """NCHW max pooling; padding is -inf as in torch."""
        kh, kw = _pair(kernel)
        sh, sw = _pair(stride)
        ph, pw = _pair(padding)
        if ph or pw:
            x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
        win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return self._emit(name, win.max(axis=(-2, -1)))


FP32 = Ops()
