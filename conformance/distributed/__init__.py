"""Running the batches of one accuracy run as tasks: in this process (``serial``, the default), on N local worker
processes, or on a running cluster (Dask distributed), with every computed batch kept on disk so that an interrupted
run resumes where it stopped.

A :class:`Job` is what the batches share (a model and its prepared ops, sent to each worker once) and the function
that computes one batch; :meth:`Engine.run` returns the batches' results in batch order whatever order they finish in,
so a run on workers gives the same bits as a serial one. The inputs are a dict of arrays or a :class:`BatchSource`
that reads each batch's rows when the run reaches them. :func:`make_engine` builds the engine from the run's
settings (``workers``, ``cluster``).
"""

from conformance.distributed.address import check_address
from conformance.distributed.engine import Batch, Engine, EngineError, Job, Progress, RunStats
from conformance.distributed.fingerprint import fingerprint, suite_version
from conformance.distributed.source import BatchSource, Inputs, pick, row_count, row_elements, take
from conformance.distributed.store import BatchStore


def make_engine(workers: int | None = None, cluster: str | None = None, store: BatchStore | None = None,
                array: str = "numpy") -> Engine:
    """``serial`` without ``workers`` and ``cluster``; ``workers`` local worker processes; or the cluster at the
    address ``cluster`` (not both: an EngineError). ``array``: the array library the batches compute on, which
    every worker must be able to load (each local worker on a GPU of its own where the library names a device kind
    without an index: :func:`conformance.numerics.arrays.spread`)."""
    if workers is not None and cluster is not None:
        raise EngineError(f"--workers {workers} and --cluster {cluster}: give one of them (local workers or a running "
                          "cluster), not both")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise EngineError(f"--workers {workers!r}: expected a positive number of local worker processes")
    if workers is None and cluster is None:
        return Engine(store)
    from conformance.distributed.cluster import DaskEngine  # deferred: a serial run never imports Dask
    return DaskEngine(workers=workers, address=cluster, store=store, array=array)


def __getattr__(name: str):
    """The Dask engine's names, imported on first use (Dask takes most of a second to import)."""
    if name == "DaskEngine":
        from conformance.distributed import cluster
        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Batch", "BatchSource", "BatchStore", "DaskEngine", "Engine", "EngineError", "Inputs", "Job", "Progress",
           "RunStats", "check_address", "fingerprint", "make_engine", "pick", "row_count", "row_elements",
           "suite_version", "take"]
