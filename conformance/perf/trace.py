"""What a simulated run measured: the record that the virtual-time run (:mod:`conformance.perf.virtual`) fills and
LoadGen's logs (:mod:`conformance.perf.mlperf_log`) are written from."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SimulationTrace:
    """What a simulated run measured (virtual seconds)."""

    sample_latencies: list[float] = field(default_factory=list)
    query_latencies: list[float] = field(default_factory=list)
    queries_issued: int = 0
    final_scheduled: float = 0.0
    final_issued: float = 0.0
    last_completion: float = 0.0
    final_query_done: float = 0.0  # when the last issued query's samples were all done (LoadGen's Server throughput)
    batches: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    samples_issued: int = 0
    samples_completed: int = 0
    errors: list[str] = field(default_factory=list)  # the device's error that ended the run early (at most one)
    issued_indices: list[int] | None = None  # every issued sample's index, in sequence-id order (when an accuracy log is due)
