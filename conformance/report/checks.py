"""Per-test check records: what a conformance test measured, against which target, and the verdict.

A conformance test calls the ``record_check`` fixture once per gated figure; the records travel on the test report's
``user_properties`` (so pytest-xdist carries them to the controller) under the key ``RECORD_KEY``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

RECORD_KEY = "conformance_check"


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
