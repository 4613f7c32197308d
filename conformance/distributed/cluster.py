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
a worker that dies on the others (up to its ``allowed-failures``); the run then says which workers were lost. When the
workers that held a job's state are all lost (a scheduler's active memory manager keeps one copy of scattered data),
the state is scattered again and the batches that needed it are submitted again.

Every wait on the network is bounded. Connecting (:func:`probe`) reads the scheduler's greeting and asks its versions
within one deadline (a peer that accepts and never answers, or answers with bytes that are not Dask's protocol, is an
:class:`EngineError` naming the address and what answered, before Dask reads a byte of it), and refuses a scheduler of
another Dask version. A local cluster's scheduler removes a worker that stops answering (no heartbeat for
:data:`WORKER_TTL_S`) and runs its batches on the others, and fails a batch no worker could take for
:data:`NO_WORKERS_TIMEOUT_S`; a running cluster's scheduler does the same with its own ``worker-ttl`` (5 minutes by
default).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import os
import socket
import struct
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator

import dask
import threadpoolctl
import distributed
from distributed import Client, KilledWorker, LocalCluster, as_completed
from distributed.client import FutureCancelledError
from distributed.comm import connect
from distributed.scheduler import NoValidWorkerError
from distributed.security import Security
from distributed.diagnostics.plugin import WorkerPlugin

from conformance.distributed.address import check_address
from conformance.distributed.engine import Engine, EngineError, Job, RunStats, timed_compute
from conformance.distributed.fingerprint import suite_version
from conformance.distributed.store import BatchStore
from conformance.numerics import arrays, heap
from conformance.numerics.formats import THREADS_VARIABLE
from models.blas import blas_signature, host_arithmetic

CONNECT_TIMEOUT_S = 10  # how long a cluster address may take to answer: its greeting, versions and client handshake
GREETING_LIMIT = 1 << 20  # bytes of a Dask scheduler's first message, its handshake (a few hundred in practice)
TLS_FILES = ("ca-file", "client.cert", "client.key")  # Dask's configuration of this process's certificates
SAME_VERSION = ("dask", "distributed")  # packages whose versions the scheduler and this process must share
WORKER_TTL_S = 60  # a local worker that sends no heartbeat for this long is removed and its batches run elsewhere
NO_WORKERS_TIMEOUT_S = 300  # a batch that no worker of a local cluster can take for this long fails the run
MAX_STATE_SCATTERS = 5  # times a job's state is sent to the workers again after those that held it were lost
IN_FLIGHT_PER_WORKER = 2  # batches submitted per worker ahead of those finished
WORKER_STOP_S = 0.5  # how long a local worker has to stop when the engine closes before its process is ended
# A run that has waited this long for its next batch asks the scheduler whether it still answers, and gives up on a
# scheduler that does not reply within SCHEDULER_REPLY_S (frozen, or its host gone without closing the connection).
SCHEDULER_CHECK_S = 30.0
SCHEDULER_REPLY_S = 30.0


def blas_differences(mine: dict[str, list], theirs: dict[str, list]) -> dict[str, tuple]:
    """The BLAS libraries loaded in both processes that differ (a library loaded in one only is not used by the
    other: scipy's, when only this process imported scipy)."""
    return {name: (mine[name], theirs[name]) for name in sorted(set(mine) & set(theirs)) if mine[name] != theirs[name]}


def library_here(spec: str) -> dict:
    """What this process computes on when the run selected array library ``spec`` (run on each worker):
    ``{"device": ...}`` (:func:`conformance.numerics.arrays.describe`), or ``{"error": ...}`` saying why it cannot."""
    try:
        return {"device": arrays.describe(arrays.load(arrays.for_this_process(spec)))}
    except arrays.ArrayLibraryError as exc:
        return {"error": str(exc)}


def worker_version() -> dict:
    """The suite's version, BLAS and numpy as a worker sees them (run on each worker)."""
    arithmetic = host_arithmetic()
    return {"suite": suite_version(), "blas": blas_signature(),
            "numpy": [arithmetic["numpy"], arithmetic["numpy_simd"]]}


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
    emulator's threads and BLAS's each the worker's share of the cores (:func:`worker_blas_threads`; the bits depend
    on neither: the emulator's products are single-threaded BLAS calls of fixed shapes, :mod:`models.blas`)."""
    share = str(worker_blas_threads(workers))
    return {**dask.config.get("distributed.nanny.pre-spawn-environ"), THREADS_VARIABLE: share, "OMP_NUM_THREADS": share,
            "OPENBLAS_NUM_THREADS": share, "MKL_NUM_THREADS": share}


def scheduler_worker_ttl(dask_scheduler=None) -> float | None:
    """The seconds after which the scheduler removes a worker that sends no heartbeat (run on the scheduler)."""
    return dask_scheduler.worker_ttl


class LocalWorkerSetup(WorkerPlugin):
    """Each local worker's process set up as the suite's own: its allocator keeps freed memory as the test process's
    does (:mod:`conformance.numerics.heap`; without it a worker spent a third of its CPU time in the kernel zeroing
    fresh pages), it knows its index among the local workers (each computes on a device of its own where the run's
    array library names a device kind without an index: :func:`conformance.numerics.arrays.spread`), and its BLAS
    threads and emulator threads set once it runs (and in every worker that replaces a lost one, which starts without
    the environment the cluster was made with) and BLAS's again as each task starts: the environment alone is not
    enough where a worker process loads BLAS before it reads the environment it was given (a program whose main
    module imports numpy), or loads another BLAS later that does not read it (scipy's)."""

    name = "conformance-local-worker"

    def __init__(self, threads: int):
        self.threads = threads

    def setup(self, worker) -> None:
        heap.keep_freed_memory()
        # a local cluster names its workers 0..N-1: a device kind without an index means the worker's own device
        arrays.set_local_worker(worker.name if isinstance(worker.name, int) else None)
        os.environ[THREADS_VARIABLE] = str(self.threads)  # read by the emulator at each pass
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


def _shown(data: bytes, limit: int = 60) -> str:
    """The first bytes a peer sent, as a person reads them."""
    text = data[:limit].decode("utf-8", "backslashreplace")
    return repr(text + ("..." if len(data) > limit else ""))


def _greeting(address: str, host: str, port: int, deadline: float, seconds: float) -> None:
    """The first bytes of a ``tcp://`` scheduler, read before Dask reads any: a Dask scheduler greets each connection
    at once with its handshake, whose first 8 bytes are its length. An :class:`EngineError` naming the address and
    what answered when nothing answers by ``deadline``, the peer closes, or what it sends is not Dask's protocol."""
    timeout = max(deadline - time.monotonic(), 0.001)
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout)
    except OSError as exc:
        raise EngineError(f"--cluster {address}: no Dask scheduler answered within {seconds:g} s "
                          f"({type(exc).__name__}: {str(exc)[:200]}); is `dask scheduler` running there and "
                          "reachable from here?") from None
    data = b""
    with sock:
        try:
            while len(data) < 8:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = sock.recv(64)
                if not chunk:
                    raise EngineError(f"--cluster {address}: the peer there accepted the connection and closed it "
                                      f"after {len(data)} bytes ({_shown(data)}) without a Dask scheduler's greeting; "
                                      "check the address and port (`dask scheduler` prints them)")
                data += chunk
        except (TimeoutError, socket.timeout):
            raise EngineError(f"--cluster {address}: something there accepted the connection but sent "
                              + (f"only {_shown(data)}" if data else "nothing")
                              + f" within {seconds:g} s, where a Dask "
                              "scheduler greets at once: not a Dask scheduler (check the address and port), or one "
                              "too busy to answer") from None
        except OSError as exc:
            raise EngineError(f"--cluster {address}: the connection failed before a Dask scheduler's greeting "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    (length,) = struct.unpack("<Q", data[:8])
    if not 0 < length <= GREETING_LIMIT:
        raise EngineError(f"--cluster {address}: the peer there answered {_shown(data)}, which is not Dask's protocol "
                          "(a web server? the dashboard's port?); expected the scheduler's address, e.g. "
                          "tcp://HOST:8786 (what `dask scheduler` prints)")


async def _versions(address: str, connection_args: dict) -> dict:
    """The scheduler's answer to ``versions``, over one Dask connection (its handshake included)."""
    comm = await connect(address, timeout=CONNECT_TIMEOUT_S * 10, **connection_args)
    try:
        await comm.write({"op": "versions", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _within(deadline: float, seconds: float, call: Callable[[], object], what: str):
    """``call()``, run in a thread of its own, if it returns by ``deadline``; an :class:`EngineError` saying ``what``
    did not answer otherwise (the thread is left to end with the process: a wait that does not end is not waited
    on)."""
    done: dict = {}

    def run():
        try:
            done["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            done["error"] = exc

    thread = threading.Thread(target=run, name="conformance-cluster-connect", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.001))
    if thread.is_alive():
        raise EngineError(f"{what} did not finish within {seconds:g} s of connecting")
    if "error" in done:
        raise done["error"]
    return done.get("value")


def local_versions() -> dict[str, str]:
    """This process's versions of :data:`SAME_VERSION`."""
    return {"dask": dask.__version__, "distributed": distributed.__version__}


def probe(address: str, timeout: float | None = None, connection_args: dict | None = None) -> dict:
    """The versions of the Dask scheduler at ``address``, asked within ``timeout`` seconds in all (the TCP connection,
    its greeting, Dask's handshake, the answer), with ``connection_args`` (default: Dask's configuration, its TLS
    certificates for a ``tls://`` address); an :class:`EngineError` naming the address and what answered when
    the peer does not answer in time, is not a Dask scheduler, or runs another version of :data:`SAME_VERSION`."""
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    if connection_args is None:
        try:  # Dask's TLS configuration, as its Client reads it
            connection_args = Security().get_connection_args("client")
        except Exception as exc:  # noqa: BLE001 - a certificate file that is missing or not one
            named = ", ".join(f"{key}={dask.config.get(f'distributed.comm.tls.{key}', None)}" for key in TLS_FILES)
            raise EngineError(f"--cluster {address}: Dask's TLS configuration ({named}) cannot be used "
                              f"({type(exc).__name__}: {str(exc)[:200]}); name readable PEM files") from None
    if scheme == "tls" and not connection_args.get("ssl_context"):
        raise EngineError(f"--cluster {address}: a tls:// scheduler needs this process's certificates, and Dask's "
                          "configuration names none; set distributed.comm.tls.ca-file, distributed.comm.tls.client.cert "
                          "and distributed.comm.tls.client.key (e.g. DASK_DISTRIBUTED__COMM__TLS__CA_FILE=ca.pem, "
                          "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=cert.pem, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"
                          "=key.pem), or give the scheduler's tcp:// address")
    if scheme == "tcp":  # in a thread of its own: resolving the host name takes no timeout
        _within(deadline + 1, timeout, lambda: _greeting(address, host, int(port), deadline, timeout),
                f"--cluster {address}: resolving and connecting to the host")

    def ask():
        quiet = logging.getLogger("distributed.protocol.core")  # it logs a peer's bytes it cannot read as CRITICAL
        was, quiet.disabled = quiet.disabled, True
        try:
            return asyncio.run(asyncio.wait_for(_versions(address, connection_args),
                                                max(deadline - time.monotonic(), 0.001)))
        finally:
            quiet.disabled = was

    try:
        answer = _within(deadline + 1, timeout, ask, f"--cluster {address}: the Dask scheduler's handshake")
    except EngineError:
        raise
    except (TimeoutError, asyncio.TimeoutError):
        raise EngineError(f"--cluster {address}: the peer there greeted like a Dask scheduler but did not answer "
                          f"within {timeout:g} s; is it a Dask scheduler, and not overloaded?") from None
    except Exception as exc:  # noqa: BLE001 - whatever the peer's bytes made Dask raise (MemoryError included)
        raise EngineError(f"--cluster {address}: the peer there does not speak Dask's protocol as this process does "
                          f"({type(exc).__name__}: {str(exc)[:200]}); expected a `dask scheduler` of distributed "
                          f"{distributed.__version__}") from None
    packages = answer.get("packages") if isinstance(answer, dict) else None
    if not isinstance(packages, dict):
        raise EngineError(f"--cluster {address}: the peer there answered {str(answer)[:200]!r} when asked its "
                          f"versions; expected a `dask scheduler` of distributed {distributed.__version__}")
    mine = local_versions()
    other = {name: packages.get(name) for name in SAME_VERSION if packages.get(name) != mine[name]}
    if other:
        shown = ", ".join(f"{name} {version} there, {mine[name]} here" for name, version in other.items())
        raise EngineError(f"--cluster {address}: the Dask scheduler there runs another version ({shown}); start it "
                          f"from the same environment as this process (pip install dask=={mine['dask']} "
                          f"distributed=={mine['distributed']})")
    return answer


class DaskEngine(Engine):
    kind = "dask"

    def __init__(self, workers: int | None = None, address: str | None = None, store: BatchStore | None = None,
                 connect_timeout: float | None = None, array: str = arrays.DEFAULT):
        super().__init__(store)
        self.array = array
        self.devices: list[str] = []  # what the workers compute on, when it is not numpy
        connect_timeout = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
        self.address = check_address(address) if address is not None else None
        self._cluster = None
        self._abandoned = False  # a run stopped with batches in flight: the workers are ended, not waited for
        self._scheduler_lost = False  # the scheduler stopped answering: nothing more is asked of it
        if self.address is not None:
            probe(self.address, connect_timeout)
            deadline = time.monotonic() + connect_timeout
            try:
                with dask.config.set({"distributed.comm.timeouts.connect": f"{connect_timeout}s"}):
                    self.client = _within(deadline, connect_timeout, lambda: Client(self.address, timeout=connect_timeout,
                                                                   set_as_default=False),
                                          f"--cluster {self.address}: the Dask client's handshake")
            except EngineError:
                raise
            except Exception as exc:  # noqa: BLE001 - a scheduler that answered the probe and then failed the client
                raise EngineError(f"--cluster {self.address}: no Dask scheduler answered within {connect_timeout:g} s "
                                  f"({type(exc).__name__}: {str(exc)[:200]}); is `dask scheduler` running there and "
                                  "reachable from here?") from None
        else:
            with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environment(workers or 1),
                                  "distributed.scheduler.worker-ttl": f"{WORKER_TTL_S}s",
                                  "distributed.scheduler.no-workers-timeout": f"{NO_WORKERS_TIMEOUT_S}s",
                                  # every worker keeps its copy of a job's state: one that is lost costs no other
                                  "distributed.scheduler.active-memory-manager.start": False}):
                self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                             dashboard_address=":0",  # a free port: never a clash
                                             silence_logs=logging.ERROR)
            self.client = Client(self._cluster, set_as_default=False)
            self.client.register_plugin(LocalWorkerSetup(worker_blas_threads(workers or 1)))
        try:
            if self.address is not None:
                _within(time.monotonic() + connect_timeout, connect_timeout, self._check_worker_ttl,
                        f"--cluster {self.address}: asking the scheduler for its worker-ttl")
            try:
                self.client.wait_for_workers(workers or 1, timeout=connect_timeout * 3)
            except TimeoutError:
                raise EngineError(f"{self.where} has no workers: none joined within {connect_timeout * 3:g} s; start "
                                  f"them with `dask worker {self.address or 'ADDRESS'}`") from None
            _within(time.monotonic() + connect_timeout * 3, connect_timeout * 3, self._check_versions,
                    f"asking the workers of {self.where} for their versions")
            if not arrays.parse(array).is_numpy:
                _within(time.monotonic() + connect_timeout * 3, connect_timeout * 3, self._check_library,
                        f"asking the workers of {self.where} for array library {array}")
        except BaseException:
            self.close()
            raise

    def _check_worker_ttl(self) -> None:
        """The cluster's scheduler removes a worker that stops answering (its ``distributed.scheduler.worker-ttl`` is
        set), so that a frozen worker's batches move to the others in bounded time (an EngineError otherwise)."""
        try:
            ttl = self.client.run_on_scheduler(scheduler_worker_ttl)
        except Exception as exc:  # noqa: BLE001 - a scheduler that refuses to run a function cannot run the batches
            raise EngineError(f"--cluster {self.address}: its scheduler cannot be asked its worker-ttl "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
        if not ttl:
            raise EngineError(f"--cluster {self.address}: its scheduler never removes a worker that stops answering "
                              "(distributed.scheduler.worker-ttl is off), so a frozen worker would hold its batches "
                              "for ever; start it with a worker-ttl (Dask's default is 5 minutes)")

    def _check_versions(self) -> None:
        """Every worker runs the same suite sources, BLAS and numpy (its version and SIMD loops) as this process (an
        EngineError naming those that do not)."""
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
        other = {worker: found["numpy"] for worker, found in theirs.items() if found["numpy"] != mine["numpy"]}
        if other:
            worker, (version, simd) = sorted(other.items())[0]
            raise EngineError(f"{len(other)} of {len(theirs)} workers of {self.where} run another numpy than this "
                              f"process ({worker}: numpy {version} with SIMD loops {', '.join(simd) or 'none'} there, "
                              f"{mine['numpy'][0]} with {', '.join(mine['numpy'][1]) or 'none'} here), so their ops "
                              "would not give the same bits; start them with the same numpy build on the same kind "
                              "of CPU")

    def _check_library(self) -> None:
        """Every worker can compute on the run's array library (an EngineError naming those that cannot); keeps
        what each computes on (:attr:`devices`)."""
        found = self.client.run(library_here, self.array)
        failed = {worker: f["error"] for worker, f in found.items() if "error" in f}
        if failed:
            worker, error = sorted(failed.items())[0]
            raise EngineError(f"{len(failed)} of {len(found)} workers of {self.where} cannot compute on --array "
                              f"{self.array} ({worker}: {error})")
        self.devices = sorted({f["device"] for f in found.values()})

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

    def _scatter(self, job: Job):
        """The job's state sent to every worker (a future of it); sent again to the workers left when one is lost while
        it is sent (a frozen worker is removed after the scheduler's worker-ttl, and the sending fails)."""
        for _ in range(MAX_STATE_SCATTERS):
            try:
                return self.client.scatter(job.state, broadcast=True, hash=False)
            except OSError as exc:  # distributed's CommClosedError: a worker lost while the state was sent to it
                error = exc
        raise EngineError(f"{job.name}: the job's model could not be sent to the workers of {self.where} "
                          f"({type(error).__name__}: {str(error)[:200]}); workers were lost each time")

    def _compute(self, job: Job, todo, stats: RunStats) -> Iterator[tuple[int, dict, dict, float]]:
        todo = iter(todo)
        first = next(todo, None)
        if first is None:
            return
        before = set(self.client.scheduler_info()["workers"])
        window = self.in_flight()
        # the job's state, scattered again when the workers that held it are lost (a scheduler's active memory
        # manager keeps one copy of scattered data: the scheduler cannot recompute it)
        shared = {"state": self._scatter(job), "scattered": 1}
        tag = uuid.uuid4().hex[:8]
        futures: dict = {}  # future -> (its batch, the state future it was given)
        retries = itertools.count()

        def submit(item, retry: int = 0):
            index, part, options = item
            future = self.client.submit(timed_compute, job.compute, shared["state"], part, options, pure=False,
                                        key=f"{job.name}-batch{index}-{tag}" + (f"-retry{retry}" if retry else ""))
            futures[future] = (item, shared["state"])
            return future

        submit(first)
        for item in itertools.islice(todo, window - 1):
            submit(item)
        running = as_completed(list(futures), loop=self.client.loop)
        try:
            while (future := self._next_finished(running)) is not None:
                item, used = futures.pop(future)
                index = item[0]
                try:
                    outputs, extras, seconds = future.result()
                except FutureCancelledError as exc:
                    if used.status == "finished":  # cancelled for another reason than a lost state
                        raise EngineError(f"{job.name}: batch {index} was cancelled by {self.where} "
                                          f"({str(exc)[:200]})") from None
                    if used is shared["state"]:
                        if shared["scattered"] > MAX_STATE_SCATTERS:
                            raise EngineError(f"{job.name}: the workers of {self.where} that held the job's model "
                                              f"were lost {MAX_STATE_SCATTERS} times; batch {index} was not computed "
                                              "(run again: the computed batches are kept)") from None
                        shared["state"] = self._scatter(job)
                        shared["scattered"] += 1
                    running.add(submit(item, next(retries) + 1))
                    continue
                except KilledWorker as exc:
                    raise EngineError(f"{job.name}: batch {index} was running on workers of {self.where} that died "
                                      f"each time it ran (out of memory, or killed?): {exc}") from None
                except NoValidWorkerError as exc:
                    raise EngineError(f"{job.name}: batch {index} found no worker of {self.where} to run it (every "
                                      "worker died or stopped answering, and none joined): "
                                      f"{str(exc)[:300]}") from None
                future.release()
                item = next(todo, None)
                if item is not None:
                    running.add(submit(item))
                yield index, outputs, extras, seconds
        finally:
            self._abandoned = self._abandoned or bool(futures)  # batches in flight when the run stopped
            if not self._scheduler_lost:  # a scheduler that stopped answering is asked nothing more
                self.client.cancel(list(futures) + [shared["state"]])
                lost = sorted(before - set(self.client.scheduler_info()["workers"]))
                if lost:
                    stats.lost_workers += lost
                    warnings.warn(f"{job.name}: {len(lost)} worker(s) of {self.where} lost during the run "
                                  f"({', '.join(lost)}); their batches ran again on the others", stacklevel=3)

    def _next_finished(self, running):
        """The next finished future of ``running`` (None when none is left), checking every SCHEDULER_CHECK_S of
        waiting that the scheduler still answers (:meth:`_check_scheduler`)."""
        waited = time.monotonic()
        while not running.has_ready():
            if running.is_empty():
                return None
            time.sleep(0.05)
            if time.monotonic() - waited >= SCHEDULER_CHECK_S:
                self._check_scheduler()
                waited = time.monotonic()
        return next(running)

    def _check_scheduler(self) -> None:
        """An EngineError when the scheduler does not reply to a request within SCHEDULER_REPLY_S: a frozen scheduler
        keeps its connections open, and a run would wait for its batches for ever."""
        try:
            self.client.sync(self.client.scheduler.identity, callback_timeout=SCHEDULER_REPLY_S)
        except (TimeoutError, OSError) as exc:
            self._scheduler_lost = True
            raise EngineError(f"the scheduler of {self.where} stopped answering: no reply in {SCHEDULER_REPLY_S:g} s "
                              f"while batches were in flight ({type(exc).__name__}; frozen, or its host unreachable); "
                              "the batches computed so far are kept: run again when it answers") from None

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), self._cluster
        self._cluster = None
        if client is not None and self._scheduler_lost:  # closing politely would wait for the scheduler
            with contextlib.suppress(Exception):
                client.close(timeout=1)
        elif client is not None:
            client.close()
        if cluster is not None:
            if self._abandoned:
                # a worker inside a batch (an interrupted run) cannot stop when asked: it is ended after
                # WORKER_STOP_S, not the nannies' default 5 s, and its batch is abandoned (nothing of it is kept)
                with contextlib.suppress(Exception):
                    cluster.sync(_stop_workers, list(cluster.workers.values()), WORKER_STOP_S)
            cluster.close()
