"""Per-test check records: what a conformance test measured, against which target, and the verdict.

A conformance test calls the ``record_check`` fixture once per gated figure; the records travel on the test report's
``user_properties`` (so pytest-xdist carries them to the controller) under the key ``RECORD_KEY``.

Performance and audit records say in their ``details`` how their figure was obtained: ``"timing"`` is ``"measured"``
(the host's clock) or ``"simulated"`` (a model of the device), and ``"timing_model"`` is, for a simulated figure,
``{"chip": ..., "chip_description": ..., "calibration": <12 hex digits of the calibration file's sha256>}`` (null for
a measured one). Records without them (accuracy records, older results files) have no stated timing. A performance
record may also say ``"clock"``: ``"virtual"`` (the simulation's own time) or ``"real"`` (the real LoadGen on the host's
clock, which a simulated device runs on as a cross-check).

Everything in a record is a plain JSON value (:func:`plain`: numpy scalars and arrays become Python numbers and lists,
NaN and infinities None, as ``results.json`` writes them), so that the records travel from pytest-xdist's workers and
a serial run and a parallel one record the same.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import PurePath

import numpy as np

RECORD_KEY = "conformance_check"
TIMING_KEY = "timing"
TIMING_MODEL_KEY = "timing_model"
CLOCK_KEY = "clock"


@dataclass
class CheckRecord:
    test_id: str  # pytest node id of the test that made the check
    kind: str  # "accuracy", "performance", "reference" or "audit"
    model: str
    precision: str
    check: str  # the metric: "f1", "snr_db", "p90_latency_ms", ...
    value: float | None  # what was measured (None when it could not be measured)
    target: float | None  # the threshold it is compared with
    op: str  # ">=" or "<=": value op target passes
    passed: bool
    scenario: str | None = None
    units: str = ""
    gating: bool = True  # informational checks (the 99.9% tier) are reported but do not fail the test
    # For a task-metric gate judged with a confidence interval: True when the interval's conservative bound clears the
    # target (the verdict is established), False when only the point estimate does ("PASS, not established");
    # None for checks without an interval. ``details["ci95"]`` then holds the [low, high] 95% interval of ``value``.
    established: bool | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def plain(value, where: str = "value"):
    """``value`` as plain JSON types, recursively: numpy scalars and arrays to Python numbers and lists, tuples and sets
    to lists, paths to strings, NaN and infinities to None; a TypeError naming ``where`` for anything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.generic, np.ndarray)):
        return plain(value.tolist(), where)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_key(k, where): plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return [plain(v, f"{where}[...]") for v in sorted(value, key=repr)]
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{where} is a {type(value).__name__}, which is not a JSON value (numbers, strings, booleans, None, "
                    f"lists and string-keyed objects)")


def _key(key, where: str) -> str:
    """A dict key as JSON has them: a string (a number, bool or None written as json.dumps writes it)."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"{where} has a key of type {type(key).__name__}; JSON objects have string keys")


def timing_of(record: dict) -> str | None:
    """``"measured"``, ``"simulated"`` or None (not stated) for a record dict."""
    timing = (record.get("details") or {}).get(TIMING_KEY)
    return timing if isinstance(timing, str) and timing else None


def timing_model_of(record: dict) -> dict | None:
    """The timing model a simulated figure came from (chip, chip_description, calibration); None when not stated."""
    model = (record.get("details") or {}).get(TIMING_MODEL_KEY)
    return model if isinstance(model, dict) else None


def provenance(record: dict) -> str:
    """How a figure was obtained, in words: ``measured``, ``simulated: C600 timing model, calibration 1a2b3c4d5e6f``,
    plain ``simulated`` without a stated timing model; empty when the record does not say."""
    timing = timing_of(record)
    if timing is None:
        return ""
    model = timing_model_of(record) if timing == "simulated" else None
    if not model:
        return timing
    parts = []
    if model.get("chip"):
        parts.append(f"{str(model['chip']).upper()} timing model")
    if model.get("calibration"):
        parts.append(f"calibration {model['calibration']}")
    return f"{timing}: {', '.join(parts)}" if parts else timing
