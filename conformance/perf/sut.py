"""The system under test for LoadGen: a request queue and a batching policy in front of a device
(:mod:`conformance.hardware.devices`: a simulated timeline such as the IPU's, or real execution such as the cpu's).

:class:`BatchingSUT` is what LoadGen talks to: ``issue_queries`` only enqueues; a dispatcher thread waits until the
device can take work, then forms a batch of up to ``max_batch`` queued samples (waiting up to ``batch_timeout_s`` after
the oldest one for more, in the Server scenario) and hands it to the device; completions are reported to LoadGen from
a completer thread at their due time. Every issued sample is completed exactly once, also when the device raises: the
samples are completed with an empty response, the error is kept, and the run is failed by the harness.
"""

from __future__ import annotations

import heapq
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass

import mlperf_loadgen as lg
import numpy as np

from conformance.hardware.devices import EMPTY_RESPONSE, Device


@dataclass
class _Pending:
    query_id: int
    index: int
    arrival: float


class BatchingSUT:
    """The LoadGen system under test over ``device`` (see the module docstring)."""

    def __init__(self, device: Device, max_batch: int, batch_timeout_s: float = 0.0, name: str = "sut"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.device = device
        self.max_batch = int(max_batch)
        self.batch_timeout_s = float(batch_timeout_s)
        self.name = name
        self.errors: list[str] = []
        self.issued = 0
        self.completed = 0
        self.batches = 0
        self._queue: deque[_Pending] = deque()
        self._due: list = []  # heap of (due time, sequence, pending samples, responses)
        self._sequence = 0
        self._busy = False  # a batch is being handed to the device (inline or by the dispatcher)
        self.lateness: list[float] = []  # how late after its due time each batch was completed (host scheduling)
        self._cond = threading.Condition()
        self._due_cond = threading.Condition()
        self._stop = False
        self._threads = [threading.Thread(target=self._dispatch, name=f"{name}-dispatch", daemon=True),
                         threading.Thread(target=self._complete_due, name=f"{name}-complete", daemon=True)]
        self.sut = lg.ConstructSUT(self.issue_queries, self.flush_queries)
        for thread in self._threads:
            thread.start()

    # -- LoadGen callbacks (LoadGen's threads): never block, never raise ------------------------------------------
    def issue_queries(self, query_samples) -> None:
        now = time.perf_counter()
        pending = [_Pending(q.id, q.index, now) for q in query_samples]
        with self._cond:
            self.issued += len(pending)
            inline = (self.device.instant and self.batch_timeout_s == 0 and not self._queue and len(pending) <= self.max_batch
                      and self.device.ready_at() <= now and not self._busy)
            if not inline:
                self._queue.extend(pending)
                self._cond.notify()
                return
            self._busy = True
        # The device is idle and nothing waits: start the batch here rather than waking the dispatcher (one thread
        # hand-off less per query, which is most of the harness's latency in SingleStream).
        try:
            self._start(pending, now)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify()

    def flush_queries(self) -> None:
        pass

    # -- dispatcher ------------------------------------------------------------------------------------------------
    def _take_batch(self) -> tuple[list[_Pending], float] | None:
        """The next batch and the time it was complete: when its last sample arrived, or when the Server timeout
        expired. The simulated timeline starts the batch then (or when the device frees), not when this thread got
        round to it, so thread wake-up delays do not accumulate into the device's timeline."""
        with self._cond:
            while (not self._queue or self._busy) and not self._stop:
                self._cond.wait(0.05)
            if self._stop and not self._queue:
                return None
            timed_out_at = None
            if self.batch_timeout_s > 0:
                deadline = self._queue[0].arrival + self.batch_timeout_s
                while len(self._queue) < self.max_batch and not self._stop:
                    if deadline - time.perf_counter() <= 0:
                        timed_out_at = deadline
                        break
                    self._cond.wait(deadline - time.perf_counter())
            count = min(self.max_batch, len(self._queue))
            batch = [self._queue.popleft() for _ in range(count)]
            self._busy = True
            return batch, max(batch[-1].arrival, timed_out_at or 0.0)

    def _dispatch(self) -> None:
        while True:
            wait = self.device.ready_at() - time.perf_counter()
            if wait > 0:  # the device is busy: let the queue grow so that the next batch can be larger
                time.sleep(wait)
            taken = self._take_batch()
            if taken is None:
                return
            batch, formed_at = taken
            try:
                self._start(batch, formed_at)
            finally:
                with self._cond:
                    self._busy = False

    def _start(self, batch: list[_Pending], formed_at: float) -> None:
        """Give the batch to the device and schedule its completion; a device error completes it empty."""
        try:
            due, responses = self.device.start_batch([p.index for p in batch], formed_at)
            if len(responses) != len(batch):
                raise RuntimeError(f"device returned {len(responses)} responses for a batch of {len(batch)}")
        except BaseException as exc:  # the samples are still completed; the harness fails the run with the error
            self.errors.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
            due, responses = time.perf_counter(), [EMPTY_RESPONSE] * len(batch)
        with self._due_cond:
            self.batches += 1
            heapq.heappush(self._due, (due, self._sequence, batch, responses))
            self._sequence += 1
            self._due_cond.notify()

    # -- completer -------------------------------------------------------------------------------------------------
    def _complete_due(self) -> None:
        while True:
            with self._due_cond:
                while not self._due and not self._stop:
                    self._due_cond.wait(0.05)
                if not self._due:
                    return
                due = self._due[0][0]
                wait = due - time.perf_counter()
                if wait > 0:
                    self._due_cond.wait(wait)  # a new batch may be due earlier: re-check
                    continue
                _, _, batch, responses = heapq.heappop(self._due)
                self.lateness.append(time.perf_counter() - due)
            keep = [np.ascontiguousarray(r) for r in responses]  # alive until LoadGen has copied what it logs
            answers = [lg.QuerySampleResponse(p.query_id, r.ctypes.data if r.nbytes else 0, r.nbytes) for p, r in zip(batch, keep)]
            lg.QuerySamplesComplete(answers)
            self.completed += len(batch)

    def close(self) -> None:
        """Stop the threads (after LoadGen returned: everything issued has been completed) and free the SUT."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        with self._due_cond:
            self._due_cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        lg.DestroySUT(self.sut)
