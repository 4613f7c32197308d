"""Whether a measured performance figure is the host's rather than the device's.

On measured hardware (the cpu, null, onnxruntime) LoadGen's latencies include everything between its schedule and the
completion: the device's own time, the queue and batching in front of it, and the host's part (LoadGen's issue thread
reaching the system under test, thread wake-ups, the completion call), which a loaded or shared machine stretches.
The system under test knows, per sample, the time from its arrival to its batch's due time (the device side);
LoadGen's figure beyond that is the host's. A failing figure is *host-bound* when the device side alone meets the
target (or the host ran more runnable threads than cores): the verdict stays FAIL, and says so, so that a shared
runner's noise is not read as the device's. A simulated device's figures come from its timing model and are exact;
they are never marked.
"""

from __future__ import annotations

import math
import os

import numpy as np

# the percentile LoadGen gates per scenario's latency check
PERCENTILES = {"p90_latency_ms": 90.0, "p99_latency_ms": 99.0, "p99_latency_ms_at_target_qps": 99.0}
BUSY_LOAD = 1.0  # runnable threads per core (1-minute load average) at which the host is oversubscribed


def device_side(latencies_s: list[float], span: list[float]) -> dict:
    """What the device side accounts for: per-sample latency percentiles (ms) and the rate over its span."""
    if not latencies_s:
        return {}
    ms = np.asarray(latencies_s, np.float64) * 1e3
    out = {"device_side_latency_ms": {f"p{q:g}": float(np.percentile(ms, q, method="higher")) for q in (50, 90, 99)}}
    first, last = span
    if math.isfinite(first) and math.isfinite(last) and last > first:
        out["device_side_samples_per_second"] = len(latencies_s) / (last - first)
    return out


def load_per_core() -> float | None:
    """The host's 1-minute load average per core (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
    except (AttributeError, OSError):
        return None


def host_bound(check: str, value: float | None, target: float, details: dict) -> str | None:
    """Why a failing figure of measured hardware is the host's (``None``: nothing shows it): the device side meets
    the target where LoadGen's figure does not, or the host was oversubscribed."""
    if value is None:
        return None
    reasons = []
    side = details.get("device_side_latency_ms") or {}
    if check in PERCENTILES:
        key = f"p{PERCENTILES[check]:g}"
        own = side.get(key)
        if own is not None and value > target >= own:
            reasons.append(f"{key} latency {value:.4g} ms, of which the device side {own:.4g} ms: "
                           f"{value - own:.4g} ms is the host's")
    elif check == "samples_per_second":
        own = details.get("device_side_samples_per_second")
        if own is not None and value < target <= own:
            reasons.append(f"{value:.4g} samples/s, the device side {own:.4g} samples/s")
    load = details.get("host_load_per_core")
    if load is not None and load >= BUSY_LOAD:
        reasons.append(f"host load {load:g} per core")
    return "; ".join(reasons) or None
