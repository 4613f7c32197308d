"""Which array library the emulator's heavy numerics run on, and on which device: ``numpy`` (the default and the
reference) or a library of the Python array API standard reached through array-api-compat.

A library is named ``NAME[:DEVICE]``: ``numpy``, ``torch:cpu``, ``torch:cuda``, ``torch:cuda:1`` (``torch`` alone is
``torch:cpu``). :func:`load` checks that the library imports and the device exists, and says what is missing;
:func:`select` makes one the process's choice and :func:`use` switches for a ``with`` block (every thread sees it).
The numerics' public functions return the kind of array they are given. Given numpy arrays, they compute on the
selected library: on another one they move their operands onto it, compute there
(:mod:`conformance.numerics.namespace`) and bring the result back. Given arrays of another library (torch tensors,
:func:`library_of`), they compute on those arrays' device and return arrays there: no move to the host. The accuracy
run moves a batch's inputs to the selected library once (:func:`to_library`) and its outputs back (:func:`to_numpy`),
so that the emulator's ops compute on the device from end to end.

What the array API standard does not cover is here, per library, and nowhere else: the narrow dtypes the roundings
cast through, the FP32 convolution, and the moves between numpy and the library's device.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
import threading
import warnings
from dataclasses import dataclass

import numpy as np

from conformance.numerics.format_table import FP8_FORMATS, format_info
from models.arrays import _numpy_like, conv2d

DEFAULT = "numpy"
LIBRARIES = ("numpy", "torch")
# the extra a library is installed by (pip install "ipu-conformance[NAME]")
EXTRAS = {"torch": "torch"}
_DEVICE = re.compile(r"^(cpu|cuda(:[0-9]{1,3})?)$")


class ArrayLibraryError(ValueError):
    """An array library or device that is not known, not installed or not present."""


class DeviceMemoryError(MemoryError):
    """The selected library's device ran out of memory: the message names the work, the device and what the library
    could not allocate (a figure is never computed from a partial batch)."""


@dataclass(frozen=True)
class ArrayLibrary:
    """One array library on one device (``device`` None for numpy)."""

    name: str
    device: str | None = None

    @property
    def spec(self) -> str:
        """The name it is selected and recorded by: ``numpy``, ``torch:cpu``, ``torch:cuda:0``."""
        return self.name if self.device is None else f"{self.name}:{self.device}"

    @property
    def is_numpy(self) -> bool:
        return self.name == "numpy"

    @property
    def on_host(self) -> bool:
        """Whether its arrays live in host memory (numpy can then view them without a copy)."""
        return self.device in (None, "cpu")

    # -- what the standard does not say, per library ----------------------------------------------------------------
    @functools.cached_property
    def module(self):
        return importlib.import_module(self.name)

    @functools.cached_property
    def xp(self):
        """The array API namespace (array-api-compat's wrapper of the library)."""
        if self.is_numpy:
            return np
        from array_api_compat import array_namespace

        return array_namespace(self.asarray(np.zeros(1, np.float32)))

    def narrow_dtype(self, fmt: str):
        """The library's dtype whose values are those of format ``fmt`` ("f16", "f143", "f152"), and whose cast from
        float32 rounds to nearest even (with FP8 overflow and Inf to NaN): the rounding kernels cast through it."""
        torch = self.module
        return getattr(torch, format_info(fmt).dtype_name)

    def extrema(self, x) -> tuple[float, float]:
        """(min, max) of a float array in one pass; NaN when it holds a NaN, (0, 0) when it is empty."""
        if self.is_numpy:
            return (float(np.min(x)), float(np.max(x))) if x.size else (0.0, 0.0)
        if x.numel() == 0:
            return 0.0, 0.0
        low, high = self.module.aminmax(x)
        return float(low), float(high)

    def asarray(self, x: np.ndarray):
        """``x`` on this library's device: a view of the same memory on the host, a copy on a GPU."""
        if self.is_numpy:
            return np.asarray(x)
        torch = self.module
        x = np.asarray(x)
        with warnings.catch_warnings():  # read-only arrays (weights, tables): never written through the view
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(x) if x.dtype.kind in "fiub" and all(s >= 0 for s in x.strides) else torch.as_tensor(
                np.ascontiguousarray(x))
        return t if self.on_host else t.to(self.device)

    @property
    def memory_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions by which the library says its device is out of memory (none for numpy, whose MemoryError
        is the host's)."""
        if self.is_numpy:
            return ()
        error = getattr(self.module, "OutOfMemoryError", None) or getattr(self.module.cuda, "OutOfMemoryError", None)
        return (error,) if error is not None else ()

    def out_of_memory(self, exc: BaseException, work: str) -> DeviceMemoryError:
        """A DeviceMemoryError for ``exc`` (one of :attr:`memory_errors`) raised while computing ``work``; the
        library's cached blocks are released first, so the next test starts with the device's memory."""
        if self.device and self.device.startswith("cuda"):
            self.module.cuda.empty_cache()
        said = " ".join(str(exc).split())
        return DeviceMemoryError(f"array library {self.spec} ran out of device memory computing {work}: {said[:400]} "
                                 "(run with --array numpy, or on a device with more memory)")

    def to_numpy(self, y) -> np.ndarray:
        """An array of this library as a numpy array (the same memory on the host)."""
        if self.is_numpy:
            return np.asarray(y)
        if self.on_host and y.is_contiguous():
            return y.numpy()
        return y.detach().contiguous().cpu().numpy()

    def contiguous(self, x):
        """``x`` with its elements in C order (itself when they are)."""
        if self.is_numpy:
            return np.ascontiguousarray(x)
        return x.contiguous()

    def view_key(self, x) -> tuple:
        """(the array owning ``x``'s memory, a key of ``x``'s place in it: start, shape, strides, dtype): views made
        afresh of one array (``w.reshape(...)``) get the same key."""
        if self.is_numpy:
            owner = x
            while isinstance(owner, np.ndarray) and owner.base is not None:
                owner = owner.base
            return owner, (id(owner), x.__array_interface__["data"][0], x.shape, x.strides, x.dtype.str)
        owner = x._base if x._base is not None else x
        return owner, (id(owner), x.data_ptr(), tuple(x.shape), tuple(x.stride()), str(x.dtype))

    def base(self, x):
        """The array ``x`` is a view of (None when it owns its memory)."""
        return x.base if self.is_numpy else x._base

    def host_view(self, x) -> np.ndarray:
        """A C-contiguous array of this library in host memory as a numpy array over the same memory (no copy: numpy
        code, such as a compiled kernel, writes through it)."""
        if self.is_numpy:
            return x
        if not self.on_host or not x.is_contiguous():
            raise ValueError(f"host_view needs a contiguous array in host memory, got one on {x.device}")
        return x.numpy()

    def host_strided_view(self, x) -> np.ndarray:
        """An array of this library in host memory as a numpy array over the same memory with the same strides (no
        copy; for numpy code that takes any layout, such as a BLAS call)."""
        if self.is_numpy:
            return x
        if not self.on_host:
            raise ValueError(f"host_strided_view needs an array in host memory, got one on {x.device}")
        return x.numpy()

    def wrap_host(self, y: np.ndarray):
        """numpy array ``y`` as an array of this library over the same memory (the inverse of :meth:`host_view`: on
        the host only, no copy)."""
        if self.is_numpy:
            return y
        if not self.on_host:
            raise ValueError(f"wrap_host makes arrays in host memory, not on {self.device}")
        return self.module.from_numpy(y)

    def conv2d_fp32(self, x, w, stride, padding, dilation, groups: int):
        """The library's own FP32 NCHW convolution (float partials: any FP32 summation order is within the bound;
        TF32 off on CUDA, :func:`models.arrays.conv2d`)."""
        return conv2d(x, w, stride, padding, dilation, groups)


NUMPY = ArrayLibrary("numpy")


def parse(spec: str) -> ArrayLibrary:
    """The library ``spec`` names (``NAME[:DEVICE]``), checked for form only; ArrayLibraryError naming what is wrong."""
    if not isinstance(spec, str):
        raise ArrayLibraryError(f"array library must be a string NAME[:DEVICE], got {type(spec).__name__}")
    name, _, device = spec.strip().partition(":")
    if name not in LIBRARIES:
        raise ArrayLibraryError(f"unknown array library {name!r} in {spec!r}; expected one of: {', '.join(LIBRARIES)} "
                                "(with :DEVICE for torch, e.g. torch:cpu, torch:cuda)")
    if name == "numpy":
        if device:
            raise ArrayLibraryError(f"numpy runs on the host only; got device {device!r} in {spec!r}")
        return NUMPY
    device = device or "cpu"
    if not _DEVICE.match(device):
        raise ArrayLibraryError(f"unknown {name} device {device!r} in {spec!r}; expected cpu, cuda or cuda:N")
    return ArrayLibrary(name, device)


def load(spec: str) -> ArrayLibrary:
    """:func:`parse`, then check that the library and array-api-compat import and that the device is present."""
    library = parse(spec)
    if library.is_numpy:
        return library
    for module in (library.name, "array_api_compat"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ArrayLibraryError(
                f"array library {library.spec} needs {module}, which cannot be imported ({exc}); install it with "
                f"pip install 'ipu-conformance[{EXTRAS[library.name]}]'") from None
    torch = library.module
    missing = [format_info(fmt).dtype_name for fmt in FP8_FORMATS if not hasattr(torch, format_info(fmt).dtype_name)]
    if missing:
        raise ArrayLibraryError(f"array library {library.spec}: torch {torch.__version__} has no FNUZ float8 dtypes "
                                f"({', '.join(missing)}); install torch 2.1 or later")
    if library.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ArrayLibraryError(f"array library {library.spec}: no CUDA device is available to torch "
                                    f"{torch.__version__} (torch.cuda.is_available() is False)")
        index = int(library.device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ArrayLibraryError(f"array library {library.spec}: CUDA device {index} does not exist (this machine "
                                    f"has {torch.cuda.device_count()})")
    return library


_lock = threading.Lock()
_selected: ArrayLibrary = NUMPY
_local_worker: int | None = None  # this process's index among a run's local worker processes (set_local_worker)


def set_local_worker(index: int | None) -> None:
    """Say that this process is local worker ``index`` of a run (None: it is not): a device kind without an index
    then means a device of its own (:func:`for_this_process`)."""
    global _local_worker
    _local_worker = index


def spread(spec: str, worker: int | None, devices: int) -> str:
    """The library local worker ``worker`` computes on when the run selected ``spec``: a device kind without an index
    (``torch:cuda``) becomes device ``worker mod devices`` (each worker a GPU of its own while there are as many);
    an indexed device, the host, numpy, or a process that is no local worker (``worker`` None: the run's own, or a
    cluster's worker, whose first visible device its launcher chose, as dask-cuda does) keep ``spec``."""
    library = parse(spec)
    if worker is None or library.device != "cuda" or devices < 1:
        return library.spec
    return f"{library.name}:cuda:{worker % devices}"


def for_this_process(spec: str) -> str:
    """:func:`spread` for this process (a local worker, or not), with the devices the library sees here."""
    library = parse(spec)
    if _local_worker is None or library.device != "cuda":
        return library.spec
    return spread(spec, _local_worker, load(spec).module.cuda.device_count())


def describe(library: ArrayLibrary) -> str:
    """What computed on ``library`` here, for the records: ``numpy``, ``torch:cpu``, ``torch:cuda:1 (NVIDIA H100 80GB
    HBM3)`` (the GPU's model: the same kind of device gives the same bits)."""
    if library.device is None or not library.device.startswith("cuda"):
        return library.spec
    cuda = library.module.cuda
    index = int(library.device.partition(":")[2] or cuda.current_device())
    return f"{library.name}:cuda:{index} ({cuda.get_device_name(index)})"


def active() -> ArrayLibrary:
    """The library the numerics compute on now (numpy unless :func:`select` or :func:`use` chose another)."""
    return _selected


def select(spec: str) -> ArrayLibrary:
    """Make library ``spec`` (checked by :func:`load`) the process's choice; returns it."""
    global _selected
    library = load(spec)
    with _lock:
        _selected = library
    return library


@contextlib.contextmanager
def use(spec: str):
    """Compute on library ``spec`` inside the block, in every thread; blocks nest."""
    global _selected
    library = load(spec)
    with _lock:
        previous, _selected = _selected, library
    try:
        yield library
    finally:
        with _lock:
            _selected = previous


# -- arrays of a library given to the numerics, and the accuracy run's moves --------------------------------------------
_LIBRARIES: dict[tuple[str, str], ArrayLibrary] = {}


def library_of(x) -> ArrayLibrary | None:
    """The library and device of array ``x`` when it is another library's than numpy's (a torch tensor); None for what
    numpy computes on (its arrays and scalars, Python numbers and sequences)."""
    if isinstance(x, np.ndarray) or _numpy_like(x):
        return None
    name = type(x).__module__.partition(".")[0]
    if name == "builtins":  # Python's own objects (numbers, bytes, names): what numpy computes on, never a device's
        return None
    if name not in LIBRARIES:
        raise ArrayLibraryError(f"arrays of {name} ({type(x).__name__}) are not supported; expected numpy arrays or "
                                f"those of: {', '.join(n for n in LIBRARIES if n != 'numpy')}")
    key = (name, str(x.device))
    library = _LIBRARIES.get(key)
    if library is None:
        library = _LIBRARIES[key] = ArrayLibrary(*key)
    return library


def host_array(x) -> np.ndarray:
    """``x`` as a numpy array (moved to the host when it is another library's)."""
    library = library_of(x)
    return np.asarray(x) if library is None else library.to_numpy(x)


def to_library(inputs: dict, library: ArrayLibrary | None = None) -> dict:
    """A batch's inputs (numpy arrays) as arrays of ``library`` (default: the selected one) on its device, each moved
    once; the same dict on numpy."""
    library = active() if library is None else library
    if library.is_numpy:
        return inputs
    return {k: library.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def to_numpy(outputs: dict) -> dict:
    """A batch's outputs as numpy arrays (those of another library moved to the host)."""
    return {k: host_array(v) for k, v in outputs.items()}
