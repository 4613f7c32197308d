"""The seed benchmark's closed loop (ByteMLPerf ``benchmark(clients, batch_size, iterations)``): ``clients`` host threads
each send a batch, wait for its answer and send the next. The device serialises the calls, so in steady state
QPS = batch / time per batch and the mean latency = clients x time per batch (Little's law)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from conformance.hardware.devices import Device


@dataclass
class ClosedLoopResult:
    clients: int
    batch_size: int
    batches: int
    qps: float  # samples per second
    avg_latency_ms: float
    p99_latency_ms: float
    errors: list


def run_closed_loop(device: Device, clients: int, batch_size: int, duration_s: float = 1.0, warmup_s: float = 0.1,
                    indices: list[int] | None = None) -> ClosedLoopResult:
    """Run the closed loop for ``duration_s`` after ``warmup_s``; latencies of calls that start after the warm-up count."""
    if clients < 1 or batch_size < 1:
        raise ValueError(f"closed loop: clients and batch_size must be >= 1, got {clients} and {batch_size}")
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    batch = list(indices if indices is not None else range(batch_size))[:batch_size]
    start = time.perf_counter()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s

    def client():
        while True:
            sent = time.perf_counter()
            if sent >= stop_at:
                return
            try:
                with lock:  # one device: calls are served one after another
                    due, _ = device.start_batch(batch, sent)
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            except Exception as exc:  # report, do not hang the other clients
                errors.append(f"{type(exc).__name__}: {exc}")
                return
            done = time.perf_counter()
            if sent >= measure_from:
                with lock:
                    latencies.append(done - sent)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration_s + warmup_s + 60)
    lat = np.sort(np.array(latencies)) if latencies else np.array([np.nan])
    return ClosedLoopResult(
        clients=clients, batch_size=batch_size, batches=len(latencies),
        qps=len(latencies) * batch_size / duration_s,
        avg_latency_ms=float(np.mean(lat) * 1e3),
        p99_latency_ms=float(lat[min(int(len(lat) * 0.99), len(lat) - 1)] * 1e3),
        errors=errors,
    )
