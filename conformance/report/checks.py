"""Per-test check records: what a conformance test measured, against which target, and the verdict.

A conformance test calls the ``record_check`` fixture once per gated figure; the records travel on the test report's
``user_properties`` (so pytest-xdist carries them to the controller) under the key ``RECORD_KEY``.

Performance and audit records say in their ``details`` how their figure was obtained: ``"timing"`` is ``"measured"``
(the host's clock) or ``"simulated"`` (a model of the device), and ``"timing_model"`` is, for a simulated figure,
``{"chip": ..., "chip_description": ..., "calibration": <12 hex digits of the calibration file's sha256>}`` (null for
a measured one). Records without them (accuracy records, older results files) have no stated timing. A performance
record may also say ``"clock"``: ``"virtual"`` (the simulation's own time) or ``"real"`` (the real LoadGen on the host's
clock, which a simulated device runs on as a cross-check).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


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
