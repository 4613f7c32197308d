"""The distributed engine: two local workers give the same bits as a serial run, a killed worker costs time and not
results, an interrupted run resumes from its stored batches, and a bad cluster is a clear error."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import threadpoolctl

from conformance.accuracy import reference
from conformance.accuracy.evaluation import (
    REFERENCE_JOB,
    HardwareWork,
    hardware_batch,
    hardware_batches,
    reference_batch,
    reference_batches,
    reference_on_engine,
    run_hardware,
    run_on_engine,
)
from conformance.distributed import (
    BatchStore,
    DaskEngine,
    Engine,
    Batch,
    EngineError,
    Job,
    Progress,
    check_address,
    fingerprint,
    make_engine,
    row_count,
)
from conformance.datasets.user import load_cases
from conformance.distributed import cluster as cluster_module
from conformance.distributed import engine as engine_module
from conformance.hardware import get_backend
from conformance.numerics import arrays
from conformance.numerics.formats import worker_threads
from conformance.targets.profiles import load_profiles
from conformance.test_accuracy import AccuracyRuns
from models import MODEL_NAMES, blas, load_model, run_batched
from models.seeds import EVAL_SEED, WEIGHT_SEED
from tests.test_dataset_criteo import criteo_lines
from tests.test_heap import bytes_mapped_for_a_large_array

SMOKE = load_profiles()["smoke"]
REPO = Path(__file__).resolve().parents[1]
# what an accuracy record's details say about the host, not the figure: its timings and the engine's stats
HOST_FACTS = ("calibration_s", "run_s", "op_checks_s", "engine")


def _case(name: str, precision: str, count: int | None = None, batch: int | None = None):
    model = load_model(name, seed=WEIGHT_SEED)
    count = count or SMOKE.samples[name]
    batch = batch or SMOKE.batch_size[name]
    inputs = reference.evaluation_inputs(model, count)
    prepared = get_backend("ipu").prepare(model, precision, batch_size=batch)
    return model, prepared, inputs, batch


def _same(a, b) -> None:
    """Two runs with the same bits: outputs, the probe's local errors, and what the run used (FP8 scales)."""
    assert sorted(a.outputs) == sorted(b.outputs)
    for key in a.outputs:
        assert a.outputs[key].dtype == b.outputs[key].dtype
        assert np.array_equal(a.outputs[key], b.outputs[key], equal_nan=True), key
    assert a.local_errors == b.local_errors
    assert a.details == b.details


@pytest.fixture(scope="module")
def workers():
    with make_engine(workers=2) as engine:
        yield engine


# -- choosing the engine ----------------------------------------------------------------------------------------------
def test_the_serial_engine_is_the_default_and_the_options_are_checked():
    assert type(make_engine()) is Engine and make_engine().workers == 1
    with pytest.raises(EngineError, match="give one of them"):
        make_engine(workers=2, cluster="tcp://127.0.0.1:8786")
    for bad in (0, -1, True, 2.5):
        with pytest.raises(EngineError, match="expected a positive number of local worker processes"):
            make_engine(workers=bad)


def test_a_serial_run_never_imports_dask():
    """The plugin, the accuracy tests, the settings of a run without --workers and --cluster and their checks."""
    code = ("import sys; from conformance import plugin, test_accuracy; from conformance.settings import settle, "
            "checks; from tests.test_settings import _parser; run = settle(vars(_parser().parse_args([]))); "
            "checks.check_engine(run); test_accuracy.AccuracyRuns(run, None, None, {}, None).engine(); "
            "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("address", ["", "localhost", "tcp://", "http://host:80", "host:0", "host:70000", "a b:1",
                                     "host:\u0668\u0667\u0668\u0666", "h\u0663st:8786"])
def test_a_malformed_cluster_address_is_refused(address):
    with pytest.raises(EngineError, match=r"not a Dask scheduler address; expected \[tcp://\]HOST:PORT"):
        check_address(address)


def test_a_cluster_address_is_normalised():
    assert check_address("10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert check_address("tls://node-3.cluster:8786") == "tls://node-3.cluster:8786"


def test_a_cluster_that_does_not_answer_is_a_clear_error():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    with pytest.raises(EngineError, match=rf"--cluster tcp://127.0.0.1:{port}: no Dask scheduler answered within 2 s"):
        DaskEngine(address=f"127.0.0.1:{port}", connect_timeout=2)
    assert time.perf_counter() - start < 30


class _Peer:
    """A loopback TCP listener that is not a Dask scheduler: it accepts each connection and then ``answer(conn)``."""

    def __init__(self, answer):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.held: list = []
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)
            self.answer(conn)

    def close(self):
        self.server.close()
        for conn in self.held:
            conn.close()


def _bounded(call, seconds: float = 120):
    """What ``call()`` raises, from a thread that must end within ``seconds`` (a hang fails the test, not the suite)."""
    done: dict = {}

    def run():
        try:
            call()
        except BaseException as exc:  # noqa: BLE001
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    return done.get("error")


HOSTILE_PEERS = {  # what the peer does once it has accepted -> what the error must say
    "silent": (lambda conn: None, "accepted the connection but sent nothing within 2 s"),
    "http": (lambda conn: conn.sendall(b"HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6\r\n\r\n<html>"),
             "answered 'HTTP/1.0 200 OK"),
    "closes": (lambda conn: conn.close(), "accepted the connection and closed it"),
    "huge-frames": (lambda conn: conn.sendall((1 << 61).to_bytes(8, "little") + b"\xff" * 8),
                    "which is not Dask's protocol"),
    "bad-frames": (lambda conn: conn.sendall((24).to_bytes(8, "little") + b"\x00" * 24),
                   "does not speak Dask's protocol"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_PEERS))
def test_a_peer_that_is_not_a_dask_scheduler_is_a_clear_error_in_bounded_time(kind):
    """A listener that accepts and never answers, answers a web server's bytes (Dask would allocate exabytes for
    them), closes, or sends frames Dask cannot read: an EngineError naming the address and what answered."""
    answer, said = HOSTILE_PEERS[kind]
    peer = _Peer(answer)
    try:
        error = _bounded(lambda: DaskEngine(address=peer.address, connect_timeout=2))
    finally:
        peer.close()
    assert isinstance(error, EngineError), repr(error)
    assert f"--cluster {peer.address}" in str(error) and said in str(error), str(error)


def test_a_host_name_that_does_not_resolve_in_time_is_a_clear_error(monkeypatch):
    """Resolving a name takes no timeout of its own (a resolver that does not answer): the deadline holds it too."""
    release = threading.Event()

    def stuck(*args, **kwargs):
        release.wait(60)
        raise socket.gaierror("released")

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    try:
        error = _bounded(lambda: cluster_module.probe("tcp://scheduler.example:8786", 1))
    finally:
        release.set()
    assert isinstance(error, EngineError), repr(error)
    assert "--cluster tcp://scheduler.example:8786: resolving and connecting to the host did not finish" in str(error)


def test_a_web_server_on_the_cluster_address_is_a_clear_error():
    """``python -m http.server``: it waits for a request, as a silent listener does."""
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = server.stdout.readline()
        port = int(line.split(" port ")[1].split()[0])
        error = _bounded(lambda: DaskEngine(address=f"127.0.0.1:{port}", connect_timeout=2))
    finally:
        server.kill()
        server.wait()
    assert isinstance(error, EngineError) and "sent nothing within 2 s" in str(error), repr(error)


@pytest.fixture
def scheduler():
    """A Dask scheduler in this process, without workers."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tcp://",
                      host="127.0.0.1") as local:
        yield local.scheduler_address


def test_a_scheduler_of_another_dask_version_is_refused(scheduler, monkeypatch):
    monkeypatch.setattr(cluster_module, "local_versions", lambda: {"dask": "2023.1.0", "distributed": "2023.1.0"})
    error = _bounded(lambda: cluster_module.probe(scheduler, 5))
    assert isinstance(error, EngineError), repr(error)
    assert f"--cluster {scheduler}: the Dask scheduler there runs another version" in str(error)
    assert "2023.1.0 here" in str(error) and f"distributed {cluster_module.distributed.__version__} there" in str(error)
    monkeypatch.undo()
    assert cluster_module.probe(scheduler, 5)["packages"]["distributed"] == cluster_module.distributed.__version__


def test_a_cluster_whose_scheduler_keeps_frozen_workers_for_ever_is_refused():
    """A scheduler with its worker-ttl off would wait for a frozen worker's batches without end."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.worker-ttl": None}):
        local = LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tcp://",
                             host="127.0.0.1")
    with local:
        error = _bounded(lambda: DaskEngine(address=local.scheduler_address, connect_timeout=2))
    assert isinstance(error, EngineError), repr(error)
    assert f"--cluster {local.scheduler_address}: its scheduler never removes a worker" in str(error)
    assert "worker-ttl" in str(error)


def test_a_tls_address_without_certificates_is_a_clear_error():
    error = _bounded(lambda: DaskEngine(address="tls://127.0.0.1:8786", connect_timeout=2))
    assert isinstance(error, EngineError), repr(error)
    assert "tls:// scheduler needs this process's certificates" in str(error)
    assert "DASK_DISTRIBUTED__COMM__TLS__CA_FILE" in str(error)


def test_a_tls_configuration_naming_a_missing_certificate_is_a_clear_error(tmp_path):
    import dask

    missing = str(tmp_path / "no-such-ca.pem")
    with dask.config.set({"distributed.comm.tls.ca-file": missing,
                          "distributed.comm.tls.client.cert": missing}):
        error = _bounded(lambda: DaskEngine(address="tls://127.0.0.1:8786", connect_timeout=2))
    assert isinstance(error, EngineError), repr(error)
    assert "--cluster tls://127.0.0.1:8786: Dask's TLS configuration" in str(error) and "no-such-ca.pem" in str(error)


def _certificates(folder: Path) -> dict[str, str]:
    """A CA and a certificate it signed (openssl), for a TLS scheduler and its client on loopback."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=conformance-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.csr", "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", "cert.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            "cert.pem", "-days", "2")
    return {name: str(folder / name) for name in ("ca.pem", "cert.pem", "key.pem")}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make certificates")
def test_a_tls_scheduler_is_reached_with_the_certificates_dasks_configuration_names(tmp_path):
    import dask
    from distributed import LocalCluster
    from distributed.security import Security

    files = _certificates(tmp_path)
    security = Security(tls_ca_file=files["ca.pem"], tls_scheduler_cert=files["cert.pem"],
                        tls_scheduler_key=files["key.pem"], tls_client_cert=files["cert.pem"],
                        tls_client_key=files["key.pem"], require_encryption=True)
    config = {"distributed.comm.tls.ca-file": files["ca.pem"], "distributed.comm.tls.client.cert": files["cert.pem"],
              "distributed.comm.tls.client.key": files["key.pem"]}
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tls://",
                      security=security) as local:
        assert local.scheduler_address.startswith("tls://")
        with dask.config.set(config):
            answer = cluster_module.probe(local.scheduler_address, 10)
        assert answer["packages"]["distributed"] == cluster_module.local_versions()["distributed"]


def test_the_accuracy_runs_take_their_engine_from_the_settings(tmp_path):
    serial = AccuracyRuns(SimpleNamespace(cache_dir=None, workers=None, cluster=None, array="numpy"), None, None, {}, None)
    assert type(serial.engine()) is Engine and serial.engine().store is None  # as without the engine: nothing stored
    runs = AccuracyRuns(SimpleNamespace(cache_dir=tmp_path, workers=1, cluster=None, array="numpy"), None, None, {}, None)
    try:
        engine = runs.engine()
        assert isinstance(engine, DaskEngine) and engine.workers == 1 and runs.engine() is engine
        assert engine.store.directory == tmp_path / "batches"
    finally:
        runs.close()


# -- fingerprints and the store ---------------------------------------------------------------------------------------
def test_the_fingerprint_follows_the_weights_and_the_prepared_ops():
    backend = get_backend("ipu")
    model = load_model("widedeep", seed=WEIGHT_SEED)
    again = load_model("widedeep", seed=WEIGHT_SEED)
    fp16 = fingerprint((model, backend.prepare(model, "fp16")))
    assert fp16 != fingerprint((model, backend.prepare(model, "fp16-half-partials")))
    assert fp16 == fingerprint((again, backend.prepare(again, "fp16")))  # built alike in another place: the same
    other = load_model("widedeep", seed=WEIGHT_SEED + 1)
    assert fp16 != fingerprint((other, backend.prepare(other, "fp16")))
    with pytest.raises(TypeError, match=r"cannot fingerprint obj\[1\]: a lock"):
        fingerprint([1, threading.Lock()])


def test_a_batch_stored_by_a_host_of_other_arithmetic_is_computed_again(tmp_path, monkeypatch):
    """A cache directory shared with a host whose BLAS runs other kernels never gives this one that host's bits."""
    store = BatchStore(tmp_path)
    key = store.key("identity", {"x": np.arange(4)}, {})
    store.write("job", key, {"y": np.ones(3, np.float32)}, {})
    here = blas.host_arithmetic()
    kernels = {name: [api, version, "Sandybridge"] for name, (api, version, _) in here["blas"].items()}
    monkeypatch.setattr("conformance.distributed.store.host_arithmetic", lambda: {**here, "blas": kernels})
    other = store.key("identity", {"x": np.arange(4)}, {})
    assert other != key and store.read("job", other) is None and not store.replaced


def test_a_damaged_stored_batch_is_computed_again(tmp_path):
    store = BatchStore(tmp_path)
    key = store.key("identity", {"x": np.arange(4)}, {})
    assert key != store.key("identity", {"x": np.arange(4) + 1}, {}) != store.key("other", {"x": np.arange(4)}, {})
    assert key != store.key("identity", {"x": np.arange(4)}, {"probe": True})
    assert store.read("job", key) is None
    path = store.write("job", key, {"y": np.ones(3, np.float32)}, {"details": {"a": 1}})
    outputs, extras = store.read("job", key)
    assert np.array_equal(outputs["y"], np.ones(3, np.float32)) and extras == {"details": {"a": 1}}
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.warns(UserWarning, match="could not be used"):
        assert store.read("job", key) is None
    assert str(path) in store.replaced
    other = store.key("identity", {"x": np.arange(5)}, {})
    store.path("job", other).parent.mkdir(parents=True, exist_ok=True)
    store.path("job", other).write_bytes(store.write("job", key, {"y": np.zeros(1)}, {}).read_bytes())
    with pytest.warns(UserWarning, match=r"computed for key"):
        assert store.read("job", other) is None


# -- same bits --------------------------------------------------------------------------------------------------------
def test_two_workers_give_the_bits_of_a_serial_run(workers):
    """widedeep at fp8 with the probe, 1024 rows in eight batches: outputs, local errors and FP8 scales the same bits
    as the serial engine's and as run_hardware's, the batches assembled in order whatever order they finished in."""
    model, prepared, inputs, _ = _case("widedeep", "fp8")
    batch = 128
    serial = run_on_engine(make_engine(), "widedeep-fp8", model, prepared, inputs, batch, probe=True)
    spread = run_on_engine(workers, "widedeep-fp8", model, prepared, inputs, batch, probe=True)
    _same(serial, spread)
    assert spread.stats.computed == len(hardware_batches(inputs, batch, True)) > 2
    ops = prepared.ops()
    outputs, local = run_hardware(model, inputs, batch, ops, probe=True)
    assert all(np.array_equal(outputs[k], serial.outputs[k]) for k in outputs)
    assert [tuple(e) for e in local] == serial.local_errors
    assert serial.details == prepared.details(ops)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_two_workers_give_the_bits_of_a_serial_run_for_every_model(workers, name):
    """Each model at fp8 with the probe on its smoke samples, at half the smoke batch: two batches at least."""
    model, prepared, inputs, batch = _case(name, "fp8", batch=max(1, SMOKE.batch_size[name] // 2))
    serial = run_on_engine(make_engine(), f"{name}-fp8", model, prepared, inputs, batch, probe=True)
    spread = run_on_engine(workers, f"{name}-fp8", model, prepared, inputs, batch, probe=True)
    _same(serial, spread)
    assert spread.stats.computed == len(hardware_batches(inputs, batch, True)) >= 2


def test_workers_running_other_sources_are_refused(workers, monkeypatch):
    monkeypatch.setattr(cluster_module, "suite_version", lambda: "0" * 64)
    with pytest.raises(EngineError, match=r"2 of 2 workers of the local cluster run other suite sources than this "
                                          r"process \(version 000000000000\)"):
        workers._check_versions()


def test_workers_running_other_blas_kernels_are_refused(workers, monkeypatch):
    mine = blas.blas_signature()
    monkeypatch.setattr(cluster_module, "blas_signature",
                        lambda: {name: [api, version, "NoSuchKernel"] for name, (api, version, _) in mine.items()})
    with pytest.raises(EngineError, match=r"2 of 2 workers of the local cluster run another BLAS than this process "
                                          r"\(.*: \['openblas', '.*', '.*'\] there, \['openblas', '.*', 'NoSuchKernel'\] "
                                          r"here\)"):
        workers._check_versions()


def test_workers_running_another_numpy_are_refused(workers, monkeypatch):
    here = blas.host_arithmetic()
    monkeypatch.setattr(cluster_module, "host_arithmetic", lambda: {**here, "numpy": "1.0.0", "numpy_simd": ["X"]})
    with pytest.raises(EngineError, match=rf"2 of 2 workers of the local cluster run another numpy than this process "
                                          rf"\(.*: numpy {here['numpy']} with SIMD loops .* there, 1\.0\.0 with X "
                                          r"here\)"):
        workers._check_versions()


def test_each_local_worker_uses_its_share_of_the_cores_for_blas(workers):
    """Two workers on C cores: C // 2 BLAS threads and as many emulator threads each (at least one); the same limits a
    worker would be given for any count of workers."""
    expected = max(1, cluster_module.usable_cores() // 2)
    assert cluster_module.worker_blas_threads(2) == expected
    assert cluster_module.worker_blas_threads(10 * cluster_module.usable_cores()) == 1
    assert cluster_module.worker_blas_threads(1) == cluster_module.usable_cores()
    workers.client.run(importlib.import_module, "scipy.linalg")  # another BLAS, loaded after the worker started
    seen = [workers.client.submit(cluster_module.blas_threads, pure=False, workers=[address]).result()
            for address in workers.client.scheduler_info()["workers"]]  # as a batch sees it
    assert seen == [expected, expected], seen
    assert set(workers.client.run(worker_threads).values()) == {expected}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc on Linux")
def test_each_local_worker_keeps_freed_memory_as_the_test_process_does(workers):
    """A worker's large arrays come from its heap: without it each one is a fresh mapping the kernel zeroes page by
    page (conformance.numerics.heap), which cost a resnet50 release run on two workers a third of its CPU time."""
    assert set(workers.client.run(bytes_mapped_for_a_large_array).values()) == {0}


@pytest.mark.parametrize("name", ["widedeep", "conformer"])
def test_blas_threads_do_not_change_the_bits(name):
    """The FP32 forward and the emulator's precisions give the same bits with BLAS on one thread and on two: why a
    worker may use its share of the cores."""
    model = load_model(name, seed=WEIGHT_SEED)
    inputs = reference.evaluation_inputs(model, 2)
    runs = {"fp32": lambda: model(inputs)}
    for precision in ("fp16", "fp8"):
        prepared = get_backend("ipu").prepare(model, precision, batch_size=2)
        runs[precision] = lambda prepared=prepared: prepared.forward(inputs, prepared.ops())
    for what, run in runs.items():
        outputs = {}
        for threads in (1, 2):
            with threadpoolctl.threadpool_limits(threads, user_api="blas"):
                outputs[threads] = run()
        assert all(np.array_equal(outputs[1][k], outputs[2][k]) for k in outputs[1]), what


# -- faults -----------------------------------------------------------------------------------------------------------
def test_a_killed_worker_costs_time_not_results(workers, tmp_path, monkeypatch):
    model, prepared, inputs, _ = _case("widedeep", "fp16", count=4096)
    batch = 256
    expected = run_on_engine(make_engine(), "widedeep-fp16", model, prepared, inputs, batch, probe=False)
    monkeypatch.setattr(workers, "store", BatchStore(tmp_path))  # to see the run's progress
    pid = next(iter(workers.client.run(os.getpid).values()))
    done: dict = {}

    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done["run"] = run_on_engine(workers, "widedeep-fp16", model, prepared, inputs, batch, probe=False)
        done["warnings"] = [str(w.message) for w in caught]

    thread = threading.Thread(target=run)
    thread.start()
    stored = tmp_path / "batches" / "widedeep-fp16"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(stored.rglob("*.npz"))) < 2:
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    thread.join(600)
    run = done["run"]
    assert len(list(stored.rglob("*.npz"))) == run.stats.computed == len(hardware_batches(inputs, batch, False))
    _same(expected, run)
    assert run.stats.lost_workers and any("lost during the run" in w for w in done["warnings"])
    workers.client.wait_for_workers(2, timeout=60)  # the nanny restarted it


def _slow_batch(state, inputs: dict, options: dict):
    """A batch's task that takes a while (so that a worker can be stopped in the middle of a run)."""
    time.sleep(0.25)
    return {"y": inputs["x"] * 2}, {}


@pytest.mark.parametrize("when", [pytest.param("before", marks=pytest.mark.slow), "during"])  # before: 30 s
def test_a_worker_that_stops_answering_loses_its_batches_to_the_others(monkeypatch, when):
    """A worker frozen mid-run (SIGSTOP: alive, its connections open, silent) is removed by the scheduler once its
    heartbeats stop, and its batches run on the other worker: the run finishes with every result and names the
    lost worker (without a bound the run would wait for it as long as it stays frozen)."""
    monkeypatch.setattr(cluster_module, "WORKER_TTL_S", 2)  # the scheduler's floor: ten heartbeats (5 s)
    job = Job("stopped", None, _slow_batch, "slow")
    inputs = {"x": np.arange(48.0)}
    batches = [Batch(i, i + 2) for i in range(0, 48, 2)]
    done: dict = {}
    with make_engine(workers=2) as engine:
        pid = next(iter(engine.client.run(os.getpid).values()))
        lines: list = []

        def run():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                done["run"] = engine.run(job, inputs, batches, progress=lines.append)
            done["warnings"] = [str(w.message) for w in caught]

        if when == "before":  # the job's model is sent to it too
            os.kill(pid, signal.SIGSTOP)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        if when == "during":
            time.sleep(1.0)  # a few batches in
            os.kill(pid, signal.SIGSTOP)
        try:
            thread.join(120)
            assert not thread.is_alive(), "the run waited for the stopped worker"
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # its nanny ended it once the scheduler removed it
                pass
    results, stats = done["run"]
    assert [r[0]["y"].tolist() for r in results] == [[2.0 * i, 2.0 * i + 2] for i in range(0, 48, 2)]
    assert stats.lost_workers and any("lost during the run" in w for w in done["warnings"])


def test_a_scheduler_that_stops_answering_ends_the_run_in_bounded_time(tmp_path, monkeypatch):
    """A scheduler frozen mid-run (SIGSTOP: its connections stay open, nothing answers) would be waited on for ever:
    the run asks it whether it still answers after a while without a finished batch, and stops with an error naming
    the cluster once it does not reply in time."""
    monkeypatch.setattr(cluster_module, "SCHEDULER_CHECK_S", 1.0)
    monkeypatch.setattr(cluster_module, "SCHEDULER_REPLY_S", 2.0)
    env = {**os.environ, "PYTHONPATH": str(REPO), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                   "--no-dashboard", "--no-nanny"], env=env, cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        engine = DaskEngine(address=address)
        engine.client.wait_for_workers(1, timeout=60)
        job = Job("frozen-scheduler", None, _slow_batch, "slow")
        done: dict = {}

        def run():
            try:
                done["run"] = engine.run(job, {"x": np.arange(400.0)}, [Batch(i, i + 2) for i in range(0, 400, 2)])
            except Exception as exc:  # noqa: BLE001 - the test says what it was
                done["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        time.sleep(1.0)
        os.kill(scheduler.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        thread.join(60)
        assert not thread.is_alive(), "the run waited for the frozen scheduler"
        assert time.monotonic() - stopped < 30
        assert isinstance(done.get("error"), EngineError), done
        assert f"the scheduler of the cluster at {address} stopped answering: no reply in 2 s" in str(done["error"])
        engine.close()
    finally:
        for process in (worker, scheduler):
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait(30)


def _scaled_batch(state: np.ndarray, inputs: dict, options: dict):
    time.sleep(0.25)
    return {"y": inputs["x"] * state[0]}, {}


def test_a_jobs_model_lost_with_the_workers_that_held_it_is_sent_again():
    """On a cluster run as Dask runs one by default (its active memory manager keeps one copy of scattered data), the
    workers holding the job's state are killed mid-run: the state is scattered again and the batches that needed it
    run again, so the run finishes with every result."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ": cluster_module.worker_environment(2)}):
        local = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                             protocol="tcp://", host="127.0.0.1")
    job = Job("lost-state", np.array([3.0]), _scaled_batch, "scaled")  # one object: scattered under one key
    inputs = {"x": np.arange(48.0)}
    batches = [Batch(i, i + 2) for i in range(0, 48, 2)]
    done: dict = {}
    with local, DaskEngine(address=local.scheduler_address) as engine:
        pids = engine.client.run(os.getpid)

        def run():
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                done["run"] = engine.run(job, inputs, batches)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        holders: list = []
        deadline = time.monotonic() + 60
        while not holders and time.monotonic() < deadline:
            holders = [w for key, where in engine.client.who_has().items() if str(key).startswith("ndarray-")
                       for w in where]
            time.sleep(0.05)
        assert holders, "the job's state was never scattered"
        time.sleep(1.5)  # half of the batches in (the run takes 3 s of sleep at least)
        for worker in set(holders):
            os.kill(pids[worker], signal.SIGKILL)
        thread.join(180)
        assert not thread.is_alive(), "the run waited without end"
    results, stats = done["run"]
    assert [r[0]["y"].tolist() for r in results] == [[3.0 * i, 3.0 * i + 3] for i in range(0, 48, 2)]
    assert stats.computed == len(batches) and stats.lost_workers


def test_a_run_with_a_cluster_address_that_is_not_dask_stops_before_any_test_with_exit_4():
    peer = _Peer(lambda conn: conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n"))
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--hardware", "cpu", "--model",
                               "widedeep", "--profile", "smoke", "--cluster", peer.address, "-p", "no:randomly"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        peer.close()
    out = done.stdout + done.stderr
    assert done.returncode == 4, out[-3000:]
    assert f"--cluster {peer.address}" in out and "HTTP/1.0 400 Bad Request" in out and "Traceback" not in out
    assert "passed" not in done.stdout and "failed" not in done.stdout


class _Interrupt:
    """``compute`` (a batch's task) that stops the run (as Ctrl-C does) once it has computed ``after`` batches."""

    def __init__(self, after: int, compute=hardware_batch):
        self.after = after
        self.compute = compute
        self.calls = 0

    def __call__(self, work, inputs, options):
        if self.calls == self.after:
            raise KeyboardInterrupt
        self.calls += 1
        return self.compute(work, inputs, options)


def test_an_interrupted_run_resumes_and_recomputes_nothing_it_has(tmp_path, workers, monkeypatch):
    model, prepared, inputs, _ = _case("widedeep", "fp8")
    batch = 128
    batches = hardware_batches(inputs, batch, True)
    identity = fingerprint((model, prepared))
    store = BatchStore(tmp_path)
    interrupt = _Interrupt(after=3)
    with pytest.raises(KeyboardInterrupt):
        Engine(store).run(Job("widedeep-fp8", HardwareWork(model, prepared), interrupt, identity), inputs, batches)
    assert len(list(tmp_path.rglob("*.npz"))) == 3
    resumed = run_on_engine(Engine(store), "widedeep-fp8", model, prepared, inputs, batch, probe=True)
    assert resumed.stats.stored == 3
    assert resumed.stats.computed == len(batches) - 3
    monkeypatch.setattr(workers, "store", store)
    on_workers = run_on_engine(workers, "widedeep-fp8", model, prepared, inputs, batch, probe=True)
    assert on_workers.stats.computed == 0 and on_workers.stats.stored == len(batches)
    _same(run_on_engine(Engine(), "widedeep-fp8", model, prepared, inputs, batch, probe=True), resumed)
    _same(resumed, on_workers)


# -- the FP32 reference ------------------------------------------------------------------------------------------------
def _beyond_the_stored(name: str, extra: int) -> tuple[object, int]:
    """The model and a sample count ``extra`` samples beyond its stored reference."""
    return load_model(name, seed=WEIGHT_SEED), reference.evaluation_count(name) + extra


def test_two_workers_give_the_fp32_reference_bits_of_a_serial_run(workers):
    """wide&deep's FP32 outputs beyond the stored reference (its samples at 1000 rows more are other draws than the
    stored ones: every row is computed) on two workers: the bits of the serial engine's and of ``run_batched``, in the
    rows ``outputs_for`` puts them."""
    model, count = _beyond_the_stored("widedeep", 1000)
    batch = 256
    serial = reference.outputs_for(model, count, batch)  # run_batched in this process, as before the engine
    stored = serial[2]["stored_rows"]
    runs = []

    def on_workers(inputs):
        outputs, stats = reference_on_engine(workers, "widedeep", model, inputs, batch)
        runs.append(stats)
        return outputs

    spread = reference.outputs_for(model, count, batch, compute=on_workers)
    assert spread[2] == serial[2] and serial[2]["computed_rows"] == count - stored > 0
    for key in serial[1]:
        assert np.array_equal(serial[1][key], spread[1][key]), key
    batches = len(reference_batches(count - stored, batch))
    assert [(s.engine, s.workers, s.computed, s.stored) for s in runs] == [("dask", 2, batches, 0)] and batches > 2
    rest = {k: v[stored:] for k, v in serial[0].items()}
    alone = reference_on_engine(make_engine(), "widedeep", model, rest, batch)[0]
    assert all(np.array_equal(alone[k], run_batched(model, rest, batch)[k]) for k in alone)


def test_an_interrupted_fp32_reference_run_resumes_from_its_stored_batches(tmp_path, workers, monkeypatch):
    """A run stopped after two of its FP32 batches keeps them; the next run reads them and computes the rest, a run
    on workers reads every batch, and both give run_batched's bits."""
    model = load_model("widedeep", seed=WEIGHT_SEED)
    batch = 256
    inputs = model.sample_inputs(1500, seed=EVAL_SEED)
    batches = reference_batches(1500, batch)
    store = BatchStore(tmp_path)
    job = Job(f"widedeep-{REFERENCE_JOB}", model, _Interrupt(after=2, compute=reference_batch),
              fingerprint((REFERENCE_JOB, model)))
    with pytest.raises(KeyboardInterrupt):
        Engine(store).run(job, inputs, batches)
    assert len(list(tmp_path.rglob("*.npz"))) == 2
    resumed, stats = reference_on_engine(Engine(store), "widedeep", model, inputs, batch)
    assert (stats.stored, stats.computed) == (2, len(batches) - 2)
    monkeypatch.setattr(workers, "store", store)
    again, stats = reference_on_engine(workers, "widedeep", model, inputs, batch)
    assert (stats.stored, stats.computed) == (len(batches), 0)
    expected = run_batched(model, inputs, batch)
    for key in expected:
        assert np.array_equal(resumed[key], expected[key]) and np.array_equal(again[key], expected[key]), key


def _runs(engine, count: int, batch: int, user_cases: dict | None = None, cache_dir: Path | None = None
          ) -> AccuracyRuns:
    """The accuracy tests' runs of widedeep at ``count`` samples (or a user's case's) in batches of ``batch``, on
    ``engine``."""
    profile = SimpleNamespace(batch_size={"widedeep": batch})
    settings = SimpleNamespace(onnx={}, cache_dir=cache_dir, workers=None, cluster=None, profile_data=profile,
                               sample_count=lambda name: count)
    models = SimpleNamespace(get=lambda name: load_model(name, seed=WEIGHT_SEED))
    runs = AccuracyRuns(settings, get_backend("ipu"), models, user_cases or {}, None)
    runs._engine = engine
    return runs


def test_the_accuracy_tests_compute_their_fp32_reference_on_the_engine(tmp_path, workers, monkeypatch):
    """The FP32 outputs an accuracy test computes beyond the stored reference are batches of its engine: two workers
    give the serial engine's bits and keep each batch; a later run reads them all."""
    count, batch = reference.evaluation_count("widedeep") + 1024, 1024
    serial = _runs(Engine(), count, batch)
    monkeypatch.setattr(workers, "store", BatchStore(tmp_path))
    spread, again = _runs(workers, count, batch), _runs(workers, count, batch)
    (inputs, expected), (_, outputs), (_, read) = serial.reference("widedeep"), spread.reference("widedeep"), \
        again.reference("widedeep")
    assert len(next(iter(inputs.values()))) == count
    for key in expected:
        assert np.array_equal(expected[key], outputs[key]) and np.array_equal(expected[key], read[key]), key
    batches = serial.fp32_runs["widedeep"]["batches"]
    assert batches == len(reference_batches(serial.sources["widedeep"]["computed_rows"], batch)) >= 2
    stats = [r.fp32_runs["widedeep"] for r in (serial, spread, again)]
    assert [(s["engine"], s["computed"], s["from_store"]) for s in stats] == \
        [("serial", batches, 0), ("dask", batches, 0), ("dask", 0, batches)]
    assert len(list((tmp_path / "batches" / f"widedeep-{REFERENCE_JOB}").rglob("*.npz"))) == batches


def test_a_users_fp32_outputs_are_computed_on_the_engine(tmp_path, workers):
    """A user's data set (12 Criteo rows, batches of 4): its FP32 outputs are batches of the engine, two workers give
    the serial engine's bits, and the whole-output cache of a user's case still answers a later run."""
    path = tmp_path / "day_23.tsv"
    path.write_text("\n".join(criteo_lines(12)) + "\n")
    cases = load_cases(("widedeep",), {}, {"widedeep": path}, {})
    serial = _runs(Engine(), 0, 4, cases, tmp_path / "serial")
    spread = _runs(workers, 0, 4, cases, tmp_path / "spread")
    (inputs, expected), (_, outputs) = serial.reference("widedeep"), spread.reference("widedeep")
    assert row_count(inputs) == 12  # streamed: read per batch
    assert all(np.array_equal(expected[k], outputs[k]) for k in expected) and sorted(expected) == sorted(outputs)
    whole = cases["widedeep"].evaluation.whole()
    assert all(np.array_equal(expected[k], run_batched(cases["widedeep"].model, whole, 4)[k]) for k in expected)
    assert (serial.fp32_runs["widedeep"]["engine"], spread.fp32_runs["widedeep"]["engine"]) == ("serial", "dask")
    assert spread.fp32_runs["widedeep"]["computed"] == 3 and spread.cached["widedeep"] is False
    again = _runs(workers, 0, 4, cases, tmp_path / "spread")
    again.reference("widedeep")
    assert again.cached["widedeep"] is True and "widedeep" not in again.fp32_runs  # nothing computed


# -- progress ---------------------------------------------------------------------------------------------------------
def test_progress_says_batches_samples_rate_and_time_left_at_most_every_interval():
    now = [100.0]
    lines: list[str] = []
    batches = [Batch(0, 2), Batch(2, 10), Batch(10, 18), Batch(18, 26), Batch(26, 30)]
    progress = Progress(lines.append, "widedeep-fp8", batches, interval_s=5, clock=lambda: now[0])
    progress.stored(batches[0])  # read from the store: done, but no part of the rate
    progress.starting()  # the first batch to compute: said at once, and once
    progress.starting()
    assert lines == ["widedeep-fp8: computing 4 of 5 batches (1 kept from an earlier run), 28 samples"]
    lines.clear()
    now[0] = 102.0
    progress.computed(batches[1])
    assert lines == []  # within the interval
    now[0] = 105.0
    progress.computed(batches[2])
    assert lines == ["widedeep-fp8: 3/5 batches, 18/30 samples, 3.2 samples/s, about 4 s left"]
    now[0] = 107.0
    progress.computed(batches[3])
    assert len(lines) == 1
    now[0] = 1000.0
    progress.computed(batches[4])  # the last batch: the test says the verdict
    assert len(lines) == 1


def test_the_engine_reports_progress_through_a_run(monkeypatch):
    model, prepared, inputs, _ = _case("widedeep", "fp16", count=512)
    batches = hardware_batches(inputs, 64, False)
    job = Job("widedeep-fp16", HardwareWork(model, prepared), hardware_batch, "")
    lines: list[str] = []
    Engine().run(job, inputs, batches, progress=lines.append)
    # said when the first batch starts; then nothing: the interval is longer than this run
    assert lines == [f"widedeep-fp16: computing {len(batches)} of {len(batches)} batches, 512 samples"]
    lines.clear()
    monkeypatch.setattr(engine_module, "PROGRESS_INTERVAL_S", 0.0)
    Engine().run(job, inputs, batches, progress=lines.append)  # a line after every batch but the last
    assert len(lines) == len(batches) >= 3 and lines[0].startswith("widedeep-fp16: computing ")
    assert lines[-1].startswith(f"widedeep-fp16: {len(batches) - 1}/{len(batches)} batches, "
                                f"{batches[-1].start}/512 samples, ")
    assert lines[-1].endswith(" s left") and "samples/s" in lines[-1]


# -- the main job -----------------------------------------------------------------------------------------------------
def _main_job(tmp_path: Path, name: str, *options: str) -> dict:
    """``pytest conformance/`` (the accuracy tests of widedeep at fp16 and fp8, ipu smoke) in a subprocess: its
    accuracy records by id, and its output."""
    report = tmp_path / name
    command = [sys.executable, "-m", "pytest", "conformance/", "-k", "test_accuracy", "--hardware", "ipu", "--profile",
               "smoke", "--model", "widedeep", "--precision", "fp16,fp8", "--report-dir", str(report), "-q",
               "-p", "no:cacheprovider", *options]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = json.loads((report / "results.json").read_text())["records"]
    return {"records": {r["id"]: r for r in records if r["kind"] == "accuracy"}, "output": done.stdout}


def test_workers_compute_on_the_runs_array_library(tmp_path):
    """``--array torch:cpu --workers 2`` gives the records of a serial ``--array torch:cpu`` run (its batches kept
    apart from numpy's), and each record says what computed its batches."""
    pytest.importorskip("torch")
    serial = _main_job(tmp_path, "serial", "--array", "torch:cpu")
    spread = _main_job(tmp_path, "workers", "--array", "torch:cpu", "--workers", "2", "--cache-dir", str(tmp_path / "c"))
    assert serial["records"] and sorted(serial["records"]) == sorted(spread["records"])
    for key, record in serial["records"].items():
        assert _figures(spread["records"][key]) == _figures(record), key
        assert record["details"]["array"] == spread["records"][key]["details"]["array"] == "torch:cpu"
        assert (record["details"]["engine"]["devices"] == spread["records"][key]["details"]["engine"]["devices"]
                == ["torch:cpu"])
    assert "accuracy batches run on the local cluster (2 workers computing on torch:cpu, " in spread["output"]


def test_batches_computed_on_another_array_library_are_kept_apart_from_numpys(tmp_path):
    pytest.importorskip("torch")
    model, prepared, inputs, _ = _case("widedeep", "fp16")
    store = BatchStore(tmp_path)

    def run():
        return run_on_engine(Engine(store), "widedeep-fp16", model, prepared, inputs, 512, probe=False)

    before = fingerprint(model)
    with arrays.use("torch:cpu"):
        first = run()
    assert first.devices == ["torch:cpu"] and first.stats.computed == first.stats.batches > 1
    model.params_like(arrays.load("torch:cpu").asarray(np.zeros(1, np.float32)))  # its parameters' copies on torch
    assert "_params_on" in vars(model) and "_params_on" not in vars(pickle.loads(pickle.dumps(model)))
    assert fingerprint(model) == before  # the copies are not what defines it
    numpy = run()
    assert numpy.devices == ["numpy"] and numpy.stats.stored == 0  # computed: torch's batches are not numpy's
    with arrays.use("torch:cpu"):
        again = run()
    assert again.stats.stored == again.stats.batches and again.devices == ["torch:cpu"]
    assert all(np.array_equal(again.outputs[k], first.outputs[k]) for k in first.outputs)


def test_workers_that_cannot_compute_on_the_array_library_are_named_before_any_batch():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(EngineError, match=r"1 of 1 workers of the local cluster cannot compute on --array torch:cuda "
                                          r"\(.*no CUDA device is available"):
        make_engine(workers=1, array="torch:cuda").close()


def _figures(record: dict) -> dict:
    """A record without the host's facts (timings, the engine's stats)."""
    details = {k: v for k, v in record["details"].items() if k not in HOST_FACTS}
    return {**{k: v for k, v in record.items() if k != "details"}, "details": details}


def test_the_main_job_on_workers_and_on_a_cluster_gives_the_serial_records(tmp_path, workers):
    """``--workers 2`` gives the records of a serial run (values, targets, verdicts, details but host facts), computing
    every batch and keeping it; a second run with ``--cluster`` on the same cache directory reads every batch. The
    smoke profile's rows are all in the stored reference: no FP32 batch is computed."""
    cache = str(tmp_path / "cache")
    serial = _main_job(tmp_path, "serial")
    spread = _main_job(tmp_path, "workers", "--workers", "2", "--cache-dir", cache)
    again = _main_job(tmp_path, "cluster", "--cluster", workers.client.scheduler.address, "--cache-dir", cache)
    assert serial["records"] and sorted(serial["records"]) == sorted(spread["records"]) == sorted(again["records"])
    for key, record in serial["records"].items():
        assert _figures(spread["records"][key]) == _figures(record) == _figures(again["records"][key]), key
        assert record["details"]["engine"]["engine"] == "serial"
        first, second = spread["records"][key]["details"]["engine"], again["records"][key]["details"]["engine"]
        assert (first["engine"], first["workers"], first["from_store"]) == ("dask", 2, 0)
        assert first["computed"] == first["batches"] == second["from_store"] == second["batches"] >= 2
        assert second["computed"] == 0 and second["lost_workers"] == []
        assert all(r["details"]["engine"]["fp32_reference"] is None
                   for r in (record, spread["records"][key], again["records"][key]))
    stored = list((tmp_path / "cache" / "batches").rglob("*.npz"))
    assert len(stored) == sum(r["details"]["engine"]["batches"] for r in
                              {(r["model"], r["precision"]): r for r in spread["records"].values()}.values())
    assert "accuracy batches run on the local cluster (2 workers" in spread["output"]
    assert f"accuracy batches run on the cluster at {workers.client.scheduler.address} (2 workers" in again["output"]


@pytest.mark.parametrize("edited, changes", [
    ("conformance/numerics/kernels.py", True),
    ("models/encoder.py", True),
    ("conformance/hardware/ipu/precisions.toml", True),
    ("conformance/accuracy/diagnosis.py", True),
    ("boundedio/__init__.py", True),
    ("conformance/perf/test04.py", False),
    ("conformance/report/plots.py", False),
    ("conformance/test_accuracy.py", False),
    ("conformance/targets/audit.toml", False),
])
def test_the_suite_version_follows_the_computing_sources_only(tmp_path, edited, changes):
    """Stored batches and calibrated scales are keyed by the code that computes them: an edit there gives another
    version, an edit of the LoadGen audits, the reports or the test drivers keeps every stored batch."""
    from conformance.distributed.fingerprint import compute_sources_sha256

    repo = Path(__file__).resolve().parents[1]
    for top in ("conformance", "models", "boundedio"):
        shutil.copytree(repo / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    before = compute_sources_sha256(tmp_path)
    assert compute_sources_sha256(tmp_path) == before
    path = tmp_path / edited
    assert path.is_file(), edited
    path.write_bytes(path.read_bytes() + b"\n# edited\n")
    assert (compute_sources_sha256(tmp_path) != before) == changes
