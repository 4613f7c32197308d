"""Dask distributed as the engine: ``workers`` local worker processes (a ``LocalCluster``, one thread each, the
emulator's kernels single-threaded) or a running Dask scheduler by its address.

Dask was chosen over Ray for this work, by measurement (the README has the table): it starts a local cluster several
times faster, takes less memory at rest and a seventh of the install, and its per-task cost is under 1% of a batch of
the suite's models. A user starts a cluster with ``dask scheduler`` and ``dask worker ADDRESS`` on any machines,
``dask-jobqueue``'s ``SLURMCluster`` on Slurm, or the Dask Kubernetes operator's ``DaskCluster`` on Kubernetes, and
gives the scheduler's address.

The state of a job (a model and its prepared ops) is scattered to every worker once per job and stays there for the
job's batches; a worker that joins later (a replacement for a lost one) fetches it from a peer. The batches' inputs are
read here and submitted a few per worker ahead of those finished (:data:`IN_FLIGHT_PER_WORKER`), so that a data set
streamed from disk is held a few batches at a time. Dask runs the tasks of
a worker that dies on the others (up to its ``allowed-failures``); the run then says which workers were lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import os
import uuid
import warnings
from collections.abc import Iterator

import dask
import threadpoolctl
from distributed import Client, KilledWorker, LocalCluster, as_completed
from distributed.diagnostics.plugin import WorkerPlugin

from conformance.distributed.address import check_address
from conformance.distributed.engine import Engine, EngineError, Job, RunStats, timed_compute
from conformance.distributed.fingerprint import suite_version
from conformance.distributed.store import BatchStore
from conformance.numerics.formats import THREADS_VARIABLE

CONNECT_TIMEOUT_S = 10  # how long a cluster address may take to answer
IN_FLIGHT_PER_WORKER = 2  # batches submitted per worker ahead of those finished
WORKER_STOP_S = 0.5  # how long a local worker has to stop when the engine closes before its process is ended


def blas_signature() -> dict[str, list]:
    """The BLAS libraries loaded in this process, by library name: API, version and CPU kernels (the bits of the FP32
    ops depend on them). Not the thread count: a product's threads share out its rows and columns, never the sum
    over one element's terms, so the bits are the same on any count (measured on the six models at every
    precision, one thread against two), and each worker may use its share of the cores."""
    return {os.path.basename(str(info.get("filepath"))): [info.get("internal_api"), info.get("version"),
                                                          info.get("architecture")]
            for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"}


def blas_differences(mine: dict[str, list], theirs: dict[str, list]) -> dict[str, tuple]:
    """The BLAS libraries loaded in both processes that differ (a library loaded in one only is not used by the
    other: scipy's, when only this process imported scipy)."""
    return {name: (mine[name], theirs[name]) for name in sorted(set(mine) & set(theirs)) if mine[name] != theirs[name]}


def worker_version() -> dict:
    """The suite's version and BLAS as a worker sees them (run on each worker)."""
    return {"suite": suite_version(), "blas": blas_signature()}


def blas_threads() -> int | None:
    """The threads BLAS uses in this process (None when no BLAS is loaded)."""
    counts = [info["num_threads"] for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]
    return max(counts) if counts else None


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_blas_threads(workers: int) -> int:
    """BLAS threads of each of ``workers`` local workers: their share of the cores, at least one (more threads than
    cores, each spinning while it waits for the others, run several times slower than one)."""
    return max(1, usable_cores() // max(1, workers))


def worker_environment(workers: int) -> dict[str, str]:
    """The environment a local worker starts with (set before it starts, so that BLAS reads it when it loads): the
    emulator's kernels in one thread (``CONFORMANCE_THREADS=1``: their bits do not depend on it) and BLAS with the
    worker's share of the cores (:func:`worker_blas_threads`; its bits do not depend on it either)."""
    blas = str(worker_blas_threads(workers))
    return {**dask.config.get("distributed.nanny.pre-spawn-environ"), THREADS_VARIABLE: "1", "OMP_NUM_THREADS": blas,
            "OPENBLAS_NUM_THREADS": blas, "MKL_NUM_THREADS": blas}


class BlasThreads(WorkerPlugin):
    """Each local worker's BLAS threads, set in the worker once it runs (and in every worker that replaces a lost
    one) and again as each task starts: the environment alone is not enough where a worker process loads BLAS before
    it reads the environment it was given (a program whose main module imports numpy), or loads another BLAS later
    that does not read it (scipy's)."""

    name = "conformance-blas-threads"

    def __init__(self, threads: int):
        self.threads = threads

    def setup(self, worker) -> None:
        threadpoolctl.threadpool_limits(limits=self.threads, user_api="blas")

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing":  # a batch takes seconds; this takes a millisecond
            threadpoolctl.threadpool_limits(limits=self.threads, user_api="blas")


async def _stop_workers(nannies, timeout: float) -> None:
    """Close the local workers' nannies at once, each worker process ended after ``timeout`` if it has not stopped."""
    await asyncio.gather(*(nanny.close(timeout=timeout, reason="engine-close") for nanny in nannies),
                         return_exceptions=True)


def has_dashboard() -> bool:
    """Whether this process can serve Dask's dashboard (it needs bokeh, which the suite does not install)."""
    return importlib.util.find_spec("bokeh") is not None


class DaskEngine(Engine):
    kind = "dask"

    def __init__(self, workers: int | None = None, address: str | None = None, store: BatchStore | None = None,
                 connect_timeout: float | None = None):
        super().__init__(store)
        connect_timeout = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        self.address = check_address(address) if address is not None else None
        self._cluster = None
        self._abandoned = False  # a run stopped with batches in flight: the workers are ended, not waited for
        if self.address is not None:
            try:
                self.client = Client(self.address, timeout=connect_timeout, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise EngineError(f"--cluster {self.address}: no Dask scheduler answered within {connect_timeout:g} s "
                                  f"({type(exc).__name__}: {str(exc)[:200]}); is `dask scheduler` running there and "
                                  "reachable from here?") from None
        else:
            with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environment(workers or 1)}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                             dashboard_address=":0",  # a free port: never a clash
                                             silence_logs=logging.ERROR)
            self.client = Client(self._cluster, set_as_default=False)
            self.client.register_plugin(BlasThreads(worker_blas_threads(workers or 1)))
        try:
            try:
                self.client.wait_for_workers(workers or 1, timeout=connect_timeout * 3)
            except TimeoutError:
                raise EngineError(f"{self.where} has no workers: none joined within {connect_timeout * 3:g} s; start "
                                  f"them with `dask worker {self.address or 'ADDRESS'}`") from None
            self._check_versions()
        except BaseException:
            self.close()
            raise

    def _check_versions(self) -> None:
        """Every worker runs the same suite sources and BLAS as this process (an EngineError naming those that do
        not)."""
        mine = worker_version()
        try:
            theirs = self.client.run(worker_version)
        except Exception as exc:  # a worker that cannot import the suite fails to unpickle the function
            raise EngineError(f"the workers of {self.where} cannot run the suite ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); install this version of it where they run") from None
        other = {worker: found for worker, found in theirs.items() if found["suite"] != mine["suite"]}
        if other:
            shown = ", ".join(f"{w} has {v['suite'][:12]}" for w, v in sorted(other.items())[:5])
            raise EngineError(f"{len(other)} of {len(theirs)} workers of {self.where} run other suite sources than "
                              f"this process (version {mine['suite'][:12]}): {shown}; install this version of the "
                              "suite on them (the same checkout) and restart them")
        other = {worker: differs for worker, found in theirs.items()
                 if (differs := blas_differences(mine["blas"], found["blas"]))}
        if other:
            worker, differs = sorted(other.items())[0]
            shown = "; ".join(f"{name}: {there} there, {here} here" for name, (here, there) in differs.items())
            raise EngineError(f"{len(other)} of {len(theirs)} workers of {self.where} run another BLAS than this "
                              f"process ({worker}: {shown}), so their FP32 ops would not give the same bits; start "
                              "them with the same numpy build on the same kind of CPU")

    @property
    def where(self) -> str:
        return f"the cluster at {self.address}" if self.address else "the local cluster"

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    @property
    def dashboard(self) -> str | None:
        """The scheduler's dashboard address: a cluster's when its scheduler serves one, the local cluster's when this
        process can draw it (bokeh is installed); None otherwise."""
        if "dashboard" not in self.client.scheduler_info().get("services", {}):
            return None
        if self.address is None and not has_dashboard():
            return None
        return self.client.dashboard_link

    def describe(self) -> dict:
        return {"engine": self.kind, "workers": self.workers, "address": self.address or "local"}

    def in_flight(self) -> int:
        """Batches submitted ahead of those finished: :data:`IN_FLIGHT_PER_WORKER` per worker, enough to keep every
        worker busy while the next batches are read, few enough that a streamed data set is held a few batches at a
        time."""
        return IN_FLIGHT_PER_WORKER * max(self.workers, 1)

    def _compute(self, job: Job, todo, stats: RunStats) -> Iterator[tuple[int, dict, dict, float]]:
        todo = iter(todo)
        first = next(todo, None)
        if first is None:
            return
        before = set(self.client.scheduler_info()["workers"])
        window = self.in_flight()
        state = self.client.scatter(job.state, broadcast=True, hash=False)
        tag = uuid.uuid4().hex[:8]
        futures: dict = {}

        def submit(item):
            index, part, options = item
            future = self.client.submit(timed_compute, job.compute, state, part, options, pure=False,
                                        key=f"{job.name}-batch{index}-{tag}")
            futures[future] = index
            return future

        submit(first)
        for item in itertools.islice(todo, window - 1):
            submit(item)
        running = as_completed(list(futures), loop=self.client.loop)
        try:
            for future in running:
                index = futures.pop(future)
                try:
                    outputs, extras, seconds = future.result()
                except KilledWorker as exc:
                    raise EngineError(f"{job.name}: batch {index} was running on workers of {self.where} that died "
                                      f"each time it ran (out of memory, or killed?): {exc}") from None
                future.release()
                item = next(todo, None)
                if item is not None:
                    running.add(submit(item))
                yield index, outputs, extras, seconds
        finally:
            self._abandoned = self._abandoned or bool(futures)  # batches in flight when the run stopped
            self.client.cancel(list(futures) + [state])
            lost = sorted(before - set(self.client.scheduler_info()["workers"]))
            if lost:
                stats.lost_workers += lost
                warnings.warn(f"{job.name}: {len(lost)} worker(s) of {self.where} lost during the run "
                              f"({', '.join(lost)}); their batches ran again on the others", stacklevel=3)

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), self._cluster
        self._cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            if self._abandoned:
                # a worker inside a batch (an interrupted run) cannot stop when asked: it is ended after
                # WORKER_STOP_S, not the nannies' default 5 s, and its batch is abandoned (nothing of it is kept)
                with contextlib.suppress(Exception):
                    cluster.sync(_stop_workers, list(cluster.workers.values()), WORKER_STOP_S)
            cluster.close()
