"""The system under test for LoadGen: a request queue and a batching policy in front of a device
(:mod:`conformance.hardware.devices`: a simulated timeline such as the IPU's, or real execution such as the cpu's).

:class:`BatchingSUT` is what LoadGen talks to: ``issue_queries`` only enqueues; a dispatcher thread waits until the
device can take work, then forms a batch of up to ``max_batch`` queued samples (waiting up to ``batch_timeout_s`` after
the oldest one for more, in the Server scenario) and hands it to the device; completions are reported to LoadGen from
a completer thread at their due time (both resident threads, reused by every run: :mod:`conformance.perf.resident`).

Every issued sample is completed exactly once, whatever happens: LoadGen waits for every sample it issued, so one
that is never completed hangs the run, and a Python exception that reaches LoadGen's C++ frames crashes the process.
Nothing raises out of a LoadGen callback or kills a thread. The first error anywhere (the device raises, returns
malformed responses or an unusable due time, a thread of the SUT fails, the QSL cannot load) is recorded in
``errors`` and makes the SUT *finish*: the samples in the queue and those still due are completed at once with empty
responses, and every later query is answered at once the same way, so that LoadGen reaches the end of its run quickly;
the harness then fails the run with the error. An interrupt (:mod:`conformance.perf.interrupts`) finishes the SUT the
same way, without an error.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass

import mlperf_loadgen as lg
import numpy as np

from conformance.hardware.devices import EMPTY_RESPONSE, Device, MalformedResponses, check_responses
from conformance.perf import resident


@dataclass
class _Pending:
    query_id: int
    index: int
    arrival: float


class BatchingSUT:
    """The LoadGen system under test over ``device`` (see the module docstring). ``name`` says which run this is in
    error messages (the suite uses the target's ``<model>-<precision>-<scenario>``)."""

    def __init__(self, device: Device, max_batch: int, batch_timeout_s: float = 0.0, name: str = "sut"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.device = device
        self.max_batch = int(max_batch)
        self.batch_timeout_s = float(batch_timeout_s)
        self.name = name
        self.errors: list[str] = []
        self.finishing: str | None = None  # why every query is now answered at once, empty (None: serving normally)
        self.interrupted = False  # a KeyboardInterrupt reached a callback (a run without the interrupt guard)
        self.issued = 0
        self.completed = 0
        self.batches = 0
        self._queue: deque[_Pending] = deque()
        self._due: list = []  # heap of (due time, sequence, pending samples, responses)
        self._sequence = 0
        self._busy = False  # a batch is being handed to the device (inline or by the dispatcher)
        self._first_answer: np.ndarray | None = None  # every later answer has its dtype and shape
        self.lateness: list[float] = []  # how late after its due time each batch was completed (host scheduling)
        # per sample, from its arrival to its batch's due time: the latency the device side (queue, batching, the
        # device's own time) accounts for; what LoadGen measures beyond it is the host's
        self.device_side: list[float] = []
        self.device_span: list[float] = [math.inf, -math.inf]  # first arrival, last due time of the served batches
        self._cond = threading.Condition()
        self._due_cond = threading.Condition()
        self._count_lock = threading.Lock()
        self._stop = False
        self.sut = lg.ConstructSUT(self.issue_queries, self.flush_queries)
        # resident threads: a thread that called LoadGen must not exit while LoadGen lives (conformance.perf.resident)
        self._threads = [resident.start(self._dispatch, f"{name}-dispatch"),
                         resident.start(self._complete_due, f"{name}-complete")]

    @property
    def device_label(self) -> str:
        return type(self.device).__name__

    # -- errors and finishing --------------------------------------------------------------------------------------
    def fail(self, where: str, exc: BaseException) -> None:
        """Record an error of ``where`` (never raises) and finish: the run is failed by the harness. A
        KeyboardInterrupt is no error: the SUT finishes and the harness raises it again after LoadGen returned."""
        if isinstance(exc, KeyboardInterrupt):
            self.interrupted = True
            self.finish("interrupted")
            return
        if isinstance(exc, MalformedResponses):
            detail = str(exc)
        else:
            detail = f"{type(exc).__name__}: {exc}\n{''.join(traceback.format_exception(exc, limit=-4)).rstrip()}"
        self.errors.append(f"{self.name}, device {self.device_label}: {where}: {detail}")
        self.finish(f"error in {where}")

    def finish(self, reason: str) -> None:
        """Answer every queued and every later sample at once with an empty response, and what is due without waiting
        for its due time, so that LoadGen ends its run quickly (an interrupt, or an error). Never raises."""
        try:
            with self._cond:
                if self.finishing is None:
                    self.finishing = reason
                queued = list(self._queue)
                self._queue.clear()
                self._cond.notify_all()
            with self._due_cond:
                self._due_cond.notify_all()
        except BaseException:  # noqa: BLE001 - finishing must not fail; the queue is empty or answered below
            queued = []
        self._answer_empty(queued)

    def _answer_empty(self, samples: list[_Pending]) -> None:
        if not samples:
            return
        try:
            lg.QuerySamplesComplete([lg.QuerySampleResponse(p.query_id, 0, 0) for p in samples])
        except BaseException as exc:  # noqa: BLE001 - nothing else can complete them; say so
            self.errors.append(f"{self.name}: {len(samples)} samples could not be completed: {type(exc).__name__}: {exc}")
            return
        self._count_completed(len(samples))

    def _count_completed(self, n: int) -> None:
        with self._count_lock:
            self.completed += n

    # -- LoadGen callbacks (LoadGen's threads): never block, never raise ------------------------------------------
    def issue_queries(self, query_samples) -> None:
        pending: list[_Pending] = []
        handed = False  # the samples are in the queue or with _start/_answer_empty, which complete them
        try:
            now = time.perf_counter()
            pending = [_Pending(q.id, q.index, now) for q in query_samples]
            with self._count_lock:
                self.issued += len(pending)
            with self._cond:
                finishing = self.finishing is not None
                inline = (not finishing and self.device.instant and self.batch_timeout_s == 0 and not self._queue
                          and len(pending) <= self.max_batch and not self._busy and self._ready_at() <= now)
                if not finishing and not inline:
                    self._queue.extend(pending)
                    handed = True
                    self._cond.notify()
                    return
                if inline:
                    self._busy = True
            handed = True
            if finishing:
                self._answer_empty(pending)
                return
            # The device is idle and nothing waits: start the batch here rather than waking the dispatcher (one thread
            # hand-off less per query, which is most of the harness's latency in SingleStream).
            try:
                self._start(pending, now)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify()
        except BaseException as exc:  # noqa: BLE001 - must not reach LoadGen
            self.fail("issue_queries", exc)
            if not handed:
                self._answer_empty(pending)

    def flush_queries(self) -> None:
        pass

    def _ready_at(self) -> float:
        """The device's ``ready_at``; an error there fails the run (and the device is then never asked again)."""
        try:
            ready = float(self.device.ready_at())
            if math.isnan(ready):
                raise MalformedResponses("ready_at() returned NaN; expected a perf_counter time")
            return ready
        except BaseException as exc:  # noqa: BLE001
            self.fail("ready_at", exc)
            return 0.0

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
                while 0 < len(self._queue) < self.max_batch and not self._stop:
                    if deadline - time.perf_counter() <= 0:
                        timed_out_at = deadline
                        break
                    self._cond.wait(deadline - time.perf_counter())
            if not self._queue:  # answered by finish() meanwhile
                return [], 0.0
            count = min(self.max_batch, len(self._queue))
            batch = [self._queue.popleft() for _ in range(count)]
            self._busy = True
            return batch, max(batch[-1].arrival, timed_out_at or 0.0)

    def _dispatch(self) -> None:
        while True:
            try:
                if not self._dispatch_one():
                    return
            except BaseException as exc:  # noqa: BLE001 - the thread must live on: LoadGen waits for the queue
                self.fail("dispatcher thread", exc)

    def _dispatch_one(self) -> bool:
        """Wait for the device, then form and start one batch; False when the SUT is closed."""
        if self.finishing is None:
            wait = self._ready_at() - time.perf_counter()
            if wait > 0:  # the device is busy: let the queue grow so that the next batch can be larger
                time.sleep(min(wait, 1.0))
                return True
        taken = self._take_batch()
        if taken is None:
            return False
        batch, formed_at = taken
        if not batch:
            with self._cond:
                self._busy = False
            return True
        try:
            self._start(batch, formed_at)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify()
        return True

    def _start(self, batch: list[_Pending], formed_at: float) -> None:
        """Give the batch to the device and schedule its completion; an error, or a finishing SUT, schedules it empty
        and due now. Never raises: the batch is always completed."""
        due, responses = None, None
        if self.finishing is None:
            try:
                due, responses = self.device.start_batch([p.index for p in batch], formed_at)
                due = float(due)
                if not math.isfinite(due):
                    raise MalformedResponses(f"start_batch returned the due time {due}; expected a finite "
                                             f"perf_counter time")
                responses = check_responses(responses, len(batch), like=self._first_answer)
                if self._first_answer is None and responses:
                    self._first_answer = responses[0]
            except BaseException as exc:  # noqa: BLE001 - the samples are still completed, empty
                self.fail(f"start_batch of {len(batch)} samples", exc)
                due, responses = None, None
        if responses is None:
            due, responses = time.perf_counter(), [EMPTY_RESPONSE] * len(batch)
        else:
            self.device_side.extend(max(due - p.arrival, 0.0) for p in batch)
            self.device_span[0] = min(self.device_span[0], min(p.arrival for p in batch))
            self.device_span[1] = max(self.device_span[1], due)
        try:
            with self._due_cond:
                self.batches += 1
                heapq.heappush(self._due, (due, self._sequence, batch, responses))
                self._sequence += 1
                self._due_cond.notify()
        except BaseException as exc:  # noqa: BLE001 - cannot schedule it: complete it here
            self.fail("scheduling a completion", exc)
            self._answer_empty(batch)

    # -- completer -------------------------------------------------------------------------------------------------
    def _complete_due(self) -> None:
        while True:
            try:
                if not self._complete_next():
                    return
            except BaseException as exc:  # noqa: BLE001 - the thread must live on: LoadGen waits for the due samples
                self.fail("completer thread", exc)

    def _complete_next(self) -> bool:
        """Complete the earliest batch once it is due (at once when finishing); False when the SUT is closed."""
        with self._due_cond:
            while not self._due and not self._stop:
                self._due_cond.wait(0.05)
            if not self._due:
                return False
            due = self._due[0][0]
            wait = due - time.perf_counter()
            if wait > 0 and self.finishing is None:
                self._due_cond.wait(wait)  # a new batch may be due earlier: re-check
                return True
            _, _, batch, responses = heapq.heappop(self._due)
            if self.finishing is None:
                self.lateness.append(-wait)
        self._answer(batch, responses)
        return True

    def _answer(self, batch: list[_Pending], responses: list[np.ndarray]) -> None:
        """Complete ``batch`` with its (checked) responses; empty if that fails."""
        try:
            answers = [lg.QuerySampleResponse(p.query_id, r.ctypes.data if r.nbytes else 0, r.nbytes)
                       for p, r in zip(batch, responses, strict=True)]
            lg.QuerySamplesComplete(answers)  # LoadGen copies what it logs before returning; `responses` lives till then
        except BaseException as exc:  # noqa: BLE001
            self.fail(f"completing {len(batch)} samples", exc)
            self._answer_empty(batch)
            return
        self._count_completed(len(batch))

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
