"""The array library a model computes on: numpy by default and as the reference, or any library of the Python array
API standard (torch on the CPU or a GPU) reached through array-api-compat.

The models and the FP32 ops compute through ``xp = namespace(x)``, the namespace of their activations, with the
standard's functions. numpy arrays get the numpy module itself (numpy 2's main namespace is the standard's): no
wrapper and no conversion, and what numpy's functions dispatch on (the graph recorder's tensors) stays on numpy.
Arrays of other libraries get array-api-compat's namespace, imported only then (the ``torch`` extra installs it).

Weights, tables and sample inputs are prepared in numpy; :func:`asarray_like` and :class:`ParamsOn` move them to the
library and device of the activations. What the standard lacks is here, named after what it does (a convolution, a
constant pad, C's fmod, a reversal that the graph recorder can follow), with the library-specific code it needs;
the numpy path of the ops keeps its own kernels (:mod:`models.ops`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Mapping

import numpy as np

_SCALARS = (np.ndarray, np.generic, int, float, complex, bool, list, tuple)


def _numpy_like(x) -> bool:
    """Whether numpy computes on ``x``: its arrays and scalars, Python scalars and sequences, None, and objects that
    take part in numpy's functions (``__array_function__``) without a namespace of their own."""
    if x is None or isinstance(x, _SCALARS):
        return True
    kind = type(x)
    return hasattr(kind, "__array_function__") and not hasattr(kind, "__array_namespace__")


def namespace(*arrays):
    """The array API namespace of ``arrays``: the numpy module when numpy computes on all of them (see the module
    docstring), otherwise array-api-compat's namespace of the others (numpy arrays and scalars among them are
    operands to move with :func:`asarray_like`); arrays of two other libraries are a TypeError."""
    foreign = [x for x in arrays if not _numpy_like(x)]
    if not foreign:
        return np
    from array_api_compat import array_namespace

    return array_namespace(*foreign)


def device(x):
    """The device of array ``x``; None for numpy's (and whatever else numpy computes on)."""
    if _numpy_like(x):
        return None
    from array_api_compat import device as device_of

    return device_of(x)


def asarray_like(value, like):
    """``value`` (a numpy array or scalar, or an array of ``like``'s library) as an array of the library and on the
    device of ``like``; on numpy ``value`` itself (a scalar as a 0-d array). The moved array keeps ``value``'s dtype
    (on the host it may share ``value``'s memory)."""
    xp = namespace(like)
    if xp is np:
        return np.asarray(value)
    if not _numpy_like(value):
        return value if namespace(value) is xp else xp.asarray(value, device=device(like))
    return _moved(xp, np.asarray(value), device(like))


def _moved(xp, value: np.ndarray, where):
    """numpy ``value`` as an array of ``xp`` on device ``where``: on the host a view of the same memory, also of a
    read-only array (weights and tables, which the ops never write through it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's warning that a read-only array becomes writable
        return xp.asarray(value, device=where)


def scalar_like(value: float, like):
    """The Python float ``value`` as a 0-d float32 array of ``like``'s library and device (numpy: ``np.float32``)."""
    xp = namespace(like)
    if xp is np:
        return np.float32(value)
    return xp.asarray(value, dtype=xp.float32, device=device(like))


class ParamsOn(Mapping):
    """A model's numpy parameters as arrays of another library on one device, each moved on first use and kept (a
    parameter replaced in the source dict is moved again; one changed in place is not)."""

    def __init__(self, params: Mapping[str, np.ndarray], like):
        self._params = params
        self._xp = namespace(like)
        self._device = device(like)
        self._moved: dict[str, tuple[np.ndarray, object]] = {}

    def __getitem__(self, name: str):
        source = self._params[name]
        kept = self._moved.get(name)
        if kept is None or kept[0] is not source:
            kept = (source, _moved(self._xp, np.asarray(source), self._device))
            self._moved[name] = kept
        return kept[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)


def common(*arrays):
    """``(xp, arrays)``: the namespace of ``arrays`` (:func:`namespace`) and the arrays in its library, the numpy ones
    moved to the device of the first that is not numpy's (numpy: all unchanged; Python scalars and None stay)."""
    xp = namespace(*arrays)
    if xp is np:
        return np, arrays
    like = next(x for x in arrays if not _numpy_like(x))
    return xp, tuple(x if x is None or isinstance(x, (int, float)) else asarray_like(x, like) for x in arrays)


def library_key(x) -> tuple[str, str] | None:
    """(namespace name, device) of array ``x``; None for numpy's."""
    xp = namespace(x)
    return None if xp is np else (xp.__name__, str(device(x)))


# -- what the standard lacks ----------------------------------------------------------------------------------------------
def _is_torch(xp) -> bool:
    from array_api_compat import is_torch_namespace

    return is_torch_namespace(xp)


def _library(x):
    """The module of the library that made array ``x`` (already imported: it made the array)."""
    return sys.modules[type(x).__module__.partition(".")[0]]


def flip(x, axis: int):
    """``x`` reversed along ``axis``: a negative-step slice where numpy computes (a view; the graph recorder records it
    as a Slice), the namespace's ``flip`` elsewhere (torch has no negative steps)."""
    xp = namespace(x)
    if xp is np:
        key = [slice(None)] * x.ndim
        key[axis] = slice(None, None, -1)
        return x[tuple(key)]
    return xp.flip(x, axis=axis)


def pad2d(x, ph: int, pw: int, value: float = 0.0):
    """NC.. ``x`` padded by ``ph`` rows and ``pw`` columns of ``value`` on each side of its last two axes."""
    xp = namespace(x)
    shape = (*x.shape[:-2], x.shape[-2] + 2 * ph, x.shape[-1] + 2 * pw)
    out = xp.full(shape, value, dtype=x.dtype, device=device(x))
    out[..., ph: ph + x.shape[-2], pw: pw + x.shape[-1]] = x
    return out


def conv2d(x, w, stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int], groups: int):
    """FP32 NCHW convolution of arrays of a library other than numpy (the numpy path has its own kernel): torch's own
    (``torch.nn.functional.conv2d``, TF32 off on CUDA, so every product is summed in FP32), or elsewhere im2col and
    one batched matmul in the standard's functions (:func:`conv2d_im2col`)."""
    xp = namespace(x)
    if _is_torch(xp):
        torch = _library(x)
        if x.is_cuda:
            with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled,
                                            benchmark=torch.backends.cudnn.benchmark,
                                            deterministic=torch.backends.cudnn.deterministic, allow_tf32=False):
                return torch.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation,
                                                  groups=groups)
        return torch.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return conv2d_im2col(x, w, stride, padding, dilation, groups)


def conv2d_im2col(x, w, stride, padding, dilation, groups: int):
    """FP32 NCHW convolution in array API standard functions: the kernel taps' strided slices of the padded input
    stacked into columns ``(N, G, Cg*kh*kw, Ho*Wo)``, then ``W (G, O/G, Cg*kh*kw) @ columns``."""
    xp = namespace(x, w)
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c = x.shape[0], x.shape[1]
    o, cg, kh, kw = w.shape
    if ph or pw:
        x = pad2d(x, ph, pw)
    ho = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    wo = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    taps = [x[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
            for i in range(kh) for j in range(kw)]
    cols = xp.reshape(xp.stack(taps, axis=2), (n, groups, cg * kh * kw, ho * wo))  # channels slowest, then taps
    y = xp.matmul(xp.reshape(w, (1, groups, o // groups, cg * kh * kw)), cols)  # (N, G, O/G, Ho*Wo)
    return xp.reshape(y, (n, o, ho, wo))


def fmod(a, b):
    """C's ``fmod`` (the remainder with the sign of ``a``), which the standard lacks (its ``remainder`` takes the
    sign of ``b``): torch's own, elsewhere ``sign(a) * remainder(|a|, |b|)``."""
    xp = namespace(a, b)
    if _is_torch(xp):
        return _library(a if not _numpy_like(a) else b).fmod(a, b)
    return xp.where(a < 0, -1.0, 1.0) * xp.remainder(xp.abs(a), xp.abs(b))


def relu(x):
    """``max(x, 0)`` with numpy's ``maximum(x, 0)``'s bits: NaN kept, negatives and -0.0 to +0.0 (the roundings to FP16
    and FP8 give many -0.0). torch's own maximum, clamp and relu keep -0.0: its clamp, then ``+ 0.0`` (which turns
    -0.0 into +0.0 and leaves every other value as it is), in a third of the time of ``where``; elsewhere
    ``where(x <= 0, 0, x)``."""
    xp = namespace(x)
    if _is_torch(xp):
        return _library(x).clamp_min(x, 0.0).add_(0.0)
    return xp.where(x <= 0, 0.0, x)


__all__ = ["ParamsOn", "asarray_like", "common", "conv2d", "conv2d_im2col", "device", "flip", "fmod", "library_key",
           "namespace", "pad2d", "relu", "scalar_like"]
