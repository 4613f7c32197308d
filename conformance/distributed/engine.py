"""The engine interface and the serial engine: batches of one job computed in this process, in batch order."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from conformance.distributed.source import Inputs, take
from conformance.distributed.store import BatchStore

# compute(state, inputs, options) -> (outputs, extras): a module-level function, so that a worker imports it by name
Compute = Callable[[object, dict, dict], tuple[dict[str, np.ndarray], dict]]


class EngineError(RuntimeError):
    """The engine cannot run the job: a cluster that does not answer or runs other sources, workers that keep dying."""


@dataclass(frozen=True)
class Job:
    """What the batches of one run share. ``state`` (a model and its prepared ops) goes to each worker once;
    ``compute(state, inputs, options)`` computes one batch; ``identity`` is what determines the outputs beside the
    inputs (:func:`conformance.distributed.fingerprint` of the state), the key of stored batches; ``name`` names
    the job in messages and in the store (a model and precision)."""

    name: str
    state: object
    compute: Compute
    identity: str


@dataclass(frozen=True)
class Batch:
    """Rows ``start:stop`` of the inputs and the options its computation takes (a JSON object)."""

    start: int
    stop: int
    options: dict = field(default_factory=dict)


@dataclass
class RunStats:
    """What a run did: batches computed and read from the store, workers that were lost and where the time went."""

    engine: str
    workers: int
    batches: int = 0
    computed: int = 0
    stored: int = 0
    lost_workers: list[str] = field(default_factory=list)
    compute_s: float = 0.0  # the batches' own compute time, summed over the workers
    wall_s: float = 0.0

    def as_dict(self) -> dict:
        return {"engine": self.engine, "workers": self.workers, "batches": self.batches, "computed": self.computed,
                "from_store": self.stored, "lost_workers": list(self.lost_workers),
                "compute_s": round(self.compute_s, 3), "wall_s": round(self.wall_s, 3)}


PROGRESS_INTERVAL_S = 5.0  # the least time between two progress lines of one run


class Progress:
    """Lines a person can follow while a run's batches are computed: batches and samples done (those read from the
    store included), the samples computed per second since the run began, and the time left at that rate; at most one
    line every ``interval_s``, none once every batch is done (the caller says the verdict)."""

    def __init__(self, say: Callable[[str], None], name: str, batches: list[Batch],
                 interval_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.say, self.name, self.clock = say, name, clock
        self.interval_s = PROGRESS_INTERVAL_S if interval_s is None else interval_s
        self.batches = len(batches)
        self.samples = sum(b.stop - b.start for b in batches)
        self.done_batches = self.done_samples = self.computed_samples = 0
        self.started = False  # the first batch to compute has been said
        self.start = self.last = clock()

    def starting(self) -> None:
        """A batch is about to be computed: the first time, said at once (one batch may take minutes), with the batches
        the store already had."""
        if self.started:
            return
        self.started = True
        kept = f" ({self.done_batches} kept from an earlier run)" if self.done_batches else ""
        self.say(f"{self.name}: computing {self.batches - self.done_batches} of {self.batches} batches"
                 f"{kept}, {self.samples - self.done_samples} samples")

    def stored(self, batch: Batch) -> None:
        self.done_batches += 1
        self.done_samples += batch.stop - batch.start

    def computed(self, batch: Batch) -> None:
        self.done_batches += 1
        self.done_samples += batch.stop - batch.start
        self.computed_samples += batch.stop - batch.start
        now = self.clock()
        if now - self.last >= self.interval_s and self.done_batches < self.batches:
            self.last = now
            self.say(self.line(now))

    def line(self, now: float) -> str:
        rate = self.computed_samples / max(now - self.start, 1e-9)
        left = (self.samples - self.done_samples) / rate if rate > 0 else float("inf")
        shown = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"
        return (f"{self.name}: {self.done_batches}/{self.batches} batches, {self.done_samples}/{self.samples} samples, "
                f"{shown} samples/s, about {_duration(left)} left")


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "an unknown time"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def canonical(extras: dict) -> dict:
    """``extras`` as the store gives it back (a JSON round trip: tuples become lists), so that a computed batch and a
    stored one are alike."""
    try:
        return json.loads(json.dumps(extras, sort_keys=False, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a batch's extras must be a JSON object of finite numbers: {exc}") from None


def timed_compute(compute: Compute, state, inputs: dict, options: dict) -> tuple[dict, dict, float]:
    """``compute``'s (outputs, extras) and the seconds it took (where it ran)."""
    start = time.perf_counter()
    outputs, extras = compute(state, inputs, options)
    return outputs, extras, time.perf_counter() - start


class Engine:
    """Runs a job's batches in this process, one after the other: the suite's behaviour without ``--workers`` and
    ``--cluster``. Subclasses compute elsewhere (:meth:`_compute`); all of them keep each computed batch in ``store``
    (when given) and take the batches it already has from it."""

    kind = "serial"

    def __init__(self, store: BatchStore | None = None):
        self.store = store

    @property
    def workers(self) -> int:
        return 1

    @property
    def where(self) -> str:
        return "this process"

    @property
    def dashboard(self) -> str | None:
        """The address of a page that shows the engine's work (None when there is none)."""
        return None

    def describe(self) -> dict:
        return {"engine": self.kind, "workers": self.workers}

    def run(self, job: Job, inputs: Inputs, batches: list[Batch],
            progress: Callable[[str], None] | None = None
            ) -> tuple[list[tuple[dict[str, np.ndarray], dict]], RunStats]:
        """(outputs, extras) of every batch, in batch order, and what the run did. Batches the store has are read,
        the others computed (and stored as each finishes, so that an interrupted run keeps what it computed).
        ``inputs``: a dict of arrays, or a :class:`BatchSource` whose batches are read as the run reaches them (at
        most :meth:`in_flight` computed batches held at once). ``progress``: where the run's :class:`Progress` lines
        go (none without it)."""
        start = time.perf_counter()
        stats = RunStats(self.kind, self.workers, batches=len(batches))
        tracker = Progress(progress or (lambda line: None), job.name, batches)
        results: list = [None] * len(batches)
        keys: dict[int, str] = {}

        def todo() -> Iterator[tuple[int, dict, dict]]:
            """The batches to compute with their inputs, read one at a time as the computation takes them."""
            for index, batch in enumerate(batches):
                part = take(inputs, batch.start, batch.stop)
                if self.store is not None:
                    keys[index] = self.store.key(job.identity, part, batch.options)
                    hit = self.store.read(job.name, keys[index])
                    if hit is not None:
                        results[index] = hit
                        stats.stored += 1
                        tracker.stored(batch)
                        continue
                tracker.starting()
                yield index, part, batch.options

        for index, outputs, extras, seconds in self._compute(job, todo(), stats):
            extras = canonical(extras)
            if self.store is not None:
                self.store.write(job.name, keys[index], outputs, extras)
            results[index] = (outputs, extras)
            stats.computed += 1
            stats.compute_s += seconds
            tracker.computed(batches[index])
        stats.wall_s = time.perf_counter() - start
        return results, stats

    def in_flight(self) -> int:
        """The most batches whose inputs are held at once while they are computed."""
        return 1

    def _compute(self, job: Job, todo: Iterator[tuple[int, dict, dict]], stats: RunStats
                 ) -> Iterator[tuple[int, dict, dict, float]]:
        """(index, outputs, extras, compute seconds) of each batch of ``todo``, in any order; ``todo`` is taken
        from lazily (at most :meth:`in_flight` batches ahead of what has been yielded)."""
        for index, part, options in todo:
            yield (index, *timed_compute(job.compute, job.state, part, options))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
