"""The interface a hardware backend implements.

A backend is a :class:`Backend` subclass registered under its name in the entry-point group
``ipu_conformance.hardware`` (the name is the ``--hardware`` choice; see :mod:`conformance.hardware`). It states what it
supports instead of being probed for it:

- :meth:`Backend.prepare` returns what runs a model at a precision (:class:`Prepared`: ops objects the model computes
  through, and what the run used, for the record); a precision that is calibrated on data (post-training
  quantization scales) is calibrated there, by the backend that has it;
- :meth:`Backend.loadgen_device` returns the device LoadGen's scenarios drive (:mod:`conformance.hardware.devices`);
- :attr:`Backend.precisions`, :attr:`Backend.models`, :attr:`Backend.scenarios`, :attr:`Backend.audits` and the
  ``*_support`` methods say what it runs, with a reason where it does not;
- :attr:`Backend.timing` says whether its latencies are measured on the host or come from a model of the device;
- what only the backend knows reaches the generic parts through it: :meth:`Backend.op_checks` (op-level numerics
  probes), :meth:`Backend.data_types` (what each precision holds, for the report), :meth:`Backend.timing_model` and
  :meth:`Backend.predicted_throughput` (a simulated device's model, for the records and the report's pictures).

The suite then checks the backend's outputs against the FP32 references with the accuracy gates of
``targets/accuracy.toml`` and its speed against ``targets/performance.toml``; a backend distributed on its own brings its
tables for its name in :attr:`Backend.targets_dir`.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, ClassVar

from conformance.hardware.devices import Device, Workload
from models import MODEL_NAMES
from models.ops import Ops, Recorder

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
AUDITS = ("TEST01", "TEST04")
# The benchmarks of LoadGen's built-in mlperf.conf that the suite's models stand for (their settings and seeds).
MLPERF_BENCHMARKS = ("resnet50", "bert", "dlrm-v2", "rnnt")
TIMINGS = ("measured", "simulated")
# MLPerf's measurements.json fields that say what a precision holds; the FP32 reference's values.
DATA_TYPE_KEYS = ("input_data_types", "weight_data_types", "weight_transformations")
FP32_DATA_TYPES = {"input_data_types": "fp32", "weight_data_types": "fp32", "weight_transformations": "none"}


def runtime_problem(module: str, names: Iterable[str] = ()) -> str | None:
    """Why the runtime ``module`` a backend runs on cannot serve it: the exception its import raises (any of them: a
    runtime whose native library does not load raises OSError, a broken install SyntaxError or RuntimeError), or the
    first of ``names`` it lacks (dotted paths below the module, e.g. ``compiler.Compiler``: a submodule is imported
    when it is not an attribute); None when it imports with all of them. For :meth:`Backend.unavailable`: the text
    follows the module's name ("the module 'x' " + this)."""
    try:
        found = importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the import raises, the runtime is not usable
        return f"cannot be imported ({type(exc).__name__}: {exception_text(exc)})"
    for name in names:
        where, value = module, found
        for part in name.split("."):
            where = f"{where}.{part}"
            try:
                value = getattr(value, part) if hasattr(value, part) else importlib.import_module(where)
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                return (f"imports but has no {where} ({type(exc).__name__}: {exception_text(exc)}): not the "
                        "version this backend runs on")
    return None


def exception_text(exc: BaseException, limit: int = 300) -> str:
    """An exception's text on one line, cut to ``limit`` characters (for a message that names it)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


class UnsupportedCombination(Exception):
    """A model/precision pair a backend cannot run; the conformance test is skipped with this reason."""


class Prepared:
    """What runs ``model`` at ``precision`` on a backend: :meth:`ops` gives an ops object the model computes through
    (each call a new one, all with the same numerics, e.g. the same quantization scales; ``recorder`` sees every
    op's output); :meth:`forward` computes a batch with such an ops object; :meth:`details` says what a run with those
    ops used, for its record (and for the backend's :meth:`Backend.op_checks`).

    A backend that executes a whole graph (an inference engine) overrides :meth:`forward` to run it, and sets
    ``per_op`` False: its ops are then only the FP32 ones, and the per-op probes (local rounding errors) are not
    measured on it."""

    per_op: bool = True  # forward computes op by op through ops(): each op's result can be probed

    def __init__(self, model, precision: str, make_ops: Callable[[Recorder | None], Ops]):
        self.model = model
        self.precision = precision
        self._make_ops = make_ops

    def ops(self, recorder: Recorder | None = None) -> Ops:
        return self._make_ops(recorder)

    def forward(self, inputs: dict, ops: Ops) -> dict:
        """The model's outputs on one batch of ``inputs``, computed with ``ops`` (one of :meth:`ops`)."""
        return self.model(inputs, ops)

    def details(self, ops: Ops) -> dict:
        return {}


class Backend(abc.ABC):
    """A hardware target. Subclasses set ``name``, ``description``, ``precisions`` and implement :meth:`prepare` and
    :meth:`loadgen_device`; they narrow the ``*_support`` methods where they cannot run something."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    precisions: tuple[str, ...] = ()
    models: tuple[str, ...] = MODEL_NAMES
    scenarios: tuple[str, ...] = SCENARIOS
    audits: tuple[str, ...] = AUDITS
    timing: ClassVar[str] = "measured"  # "simulated": latencies come from a model of the device, not the host's clock
    chips: ClassVar[tuple[str, ...]] = ()  # the simulated chips ``--device`` chooses from (a simulated backend's)
    targets_dir: ClassVar[Path | None] = None  # accuracy.toml / performance.toml tables of a backend shipped on its own
    # Where a backend that calibrates (FP8 input scales) keeps what it calibrated between runs: set by the run
    # (``conformance.datasets.cache.ScaleCache``); None calibrates in every run. Backends that do not calibrate ignore it.
    scale_store = None
    say: Callable[[str], None] | None = None  # a line on the run's terminal: the backend's own long phases, as they start

    def __init__(self, chip: str | None = None):
        if chip is not None and chip not in self.chips:
            if not self.chips:
                raise ValueError(f"--device {chip}: hardware {self.name!r} has no simulated chips to choose from")
            raise ValueError(f"--device {chip}: unknown chip for hardware {self.name!r}; expected one of: "
                             f"{', '.join(self.chips)}")
        self.chip = chip or (self.chips[0] if self.chips else None)

    def unavailable(self) -> str | None:
        """Why this backend cannot run here (a runtime or driver it needs is missing: say what and how to get it);
        None when it can. A run that chooses it stops with this as a usage error before any test. The backend's
        class and constructor must work without what it needs to run: the suite reads every registered backend's
        precisions and data files, whichever hardware runs."""
        return None

    def check_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise ValueError(
                f"unknown precision {precision!r} for hardware {self.name!r}; expected one of: {', '.join(self.precisions)}"
            )

    def chip_support(self, precision: str) -> str | None:
        """Why the chosen chip (``--device``) cannot run ``precision`` at all (it lacks the units the precision
        computes in); None when it can. Its tests are then skipped with this reason: accuracy, performance and audits."""
        return None

    def _model_support(self, model_name: str, precision: str) -> str | None:
        self.check_precision(precision)
        if model_name not in self.models:
            return f"{self.name} does not run {model_name} (it runs: {', '.join(self.models)})"
        return self.chip_support(precision)

    def accuracy_support(self, model_name: str, precision: str) -> str | None:
        """Why the backend cannot run the accuracy test of ``model_name`` at ``precision``; None when it can."""
        return self._model_support(model_name, precision)

    def scenario_support(self, model_name: str, precision: str, scenario: str) -> str | None:
        """Why the backend cannot run ``scenario`` for the pair; None when it can."""
        if scenario not in self.scenarios:
            return f"{self.name} does not run the {scenario} scenario (it runs: {', '.join(self.scenarios)})"
        return self._model_support(model_name, precision)

    def audit_support(self, model_name: str, precision: str, audit: str) -> str | None:
        """Why the backend cannot be audited with ``audit`` for the pair; None when it can. TEST04 (a repeated sample
        is not served faster) cannot detect anything on a simulated device: its time comes from a model of the batch,
        not from the sample."""
        if audit not in self.audits:
            return f"{self.name} does not run the {audit} audit (it runs: {', '.join(self.audits) or 'none'})"
        if audit == "TEST04" and self.timing == "simulated":
            return ("not applicable to a simulated device: its timing model prices a batch by its size, so a repeated "
                    "sample cannot be served faster")
        return self._model_support(model_name, precision)

    def timing_model(self) -> dict | None:
        """For a simulated backend, what its figures come from (chip, its description, the calibration's hash), for
        every performance record; None for measured hardware."""
        return None

    @abc.abstractmethod
    def prepare(self, model, precision: str, calibration_inputs: dict | None = None, *, batch_size: int = 4,
                case: str | None = None) -> Prepared:
        """What runs ``model`` at ``precision``. For a precision calibrated on data: ``calibration_inputs`` (input
        name -> samples) replace the backend's own calibration set, run in batches of ``batch_size``. ``case`` names
        the backend's per-model settings to use when they are not those of ``model.name`` (a checkpoint that is not
        one of the six models). A backend that calibrates nothing ignores all three."""

    @abc.abstractmethod
    def loadgen_device(self, model, precision: str, workload: Workload) -> Device:
        """The device LoadGen's scenarios drive for ``model`` at ``precision`` on ``workload``."""

    def op_checks(self, model_name: str, precision: str, run: dict) -> tuple[int, dict] | None:
        """Op-level numerics checks of the pair against an independent oracle: (mismatches, what each probe compared
        and its first mismatch). ``run``: what the model's run used, the :meth:`Prepared.details` of its ops (``{}``
        for checks made apart from a run). None: the backend has no such checks (a gate on ``op_mismatches`` then
        fails as not computed)."""
        return None

    def data_types(self, precision: str) -> dict[str, str]:
        """What ``precision`` holds, as MLPerf's measurements.json says it (:data:`DATA_TYPE_KEYS`), for the report;
        by default the precision's name in each field (``fp32``: the FP32 reference's values)."""
        if precision == "fp32":
            return dict(FP32_DATA_TYPES)
        return {key: precision for key in DATA_TYPE_KEYS}

    def predicted_throughput(self, model_name: str, precision: str, batches, rows_per_sample: int) -> dict | None:
        """For a simulated backend, its device model's prediction at each device batch of ``batches`` (samples of
        ``rows_per_sample`` rows): ``{"samples_per_s": [...], "fits": [...] (the batch fits the device's memory),
        "packed": whether the runs pack sequences into rows}``; None for measured hardware."""
        return None

    def versions(self) -> dict[str, str]:
        """Versions of what this backend runs on, for the report header."""
        return {}

    def start_up(self) -> str | None:
        """Work the backend will do once, on first use, that takes long enough to be said before the tests start
        (compiling its kernels): a line for the terminal, or None."""
        return None
