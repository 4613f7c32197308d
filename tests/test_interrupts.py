"""Ctrl-C (SIGINT) and SIGTERM stop a run cleanly, inside a LoadGen scenario too: LoadGen finishes its run (every issued
query completed, its logs written), the report is written with ``interrupted: true`` and pytest exits with 2; no
segmentation fault, no abort. Every run here is a subprocess with a time limit: a hang fails instead of blocking."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf.harness import ScenarioSettings
from conformance.perf.interrupts import deferred_interrupts, terminate_as_interrupt
from conformance.perf.virtual import SUMMARY_FILE, simulate_scenario

REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 240
CRASH_SIGNS = ("Fatal Python error", "Segmentation fault", "terminate called", "std::bad_alloc", "core dumped",
               "INTERNALERROR", "Aborted")


def _default_sigint() -> None:
    """In the child: SIGINT as Python has it by default (a background job of a shell may inherit it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _loadgen_started(root: Path) -> Path | None:
    """The detail log of a LoadGen run that has started under ``root`` (staged or in the report), if any."""
    return next(iter(sorted(root.rglob("mlperf_log_detail.txt"))), None)


def _interrupt_suite(tmp_path: Path, signum: int, options: list[str]) -> tuple[subprocess.CompletedProcess, str]:
    """Run the suite with ``options``, send ``signum`` once a LoadGen scenario has started, and wait for the end.
    Returns the finished process (its output) and the scenario's test id."""
    report = tmp_path / "report"
    process = subprocess.Popen([sys.executable, "-m", "pytest", "conformance/", "--report-dir", str(report), "-v",
                                "-p", "no:randomly", "-p", "no:cacheprovider", *options],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + LIMIT_S
        while (log := _loadgen_started(tmp_path)) is None:
            assert process.poll() is None, "the run ended before any LoadGen scenario started:\n" + process.stdout.read()
            assert time.monotonic() < deadline, "no LoadGen scenario started"
            time.sleep(0.05)
        time.sleep(0.5)  # queries in flight
        process.send_signal(signum)
        output, _ = process.communicate(timeout=LIMIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, output), log.parent.name


def _assert_interrupted_report(tmp_path: Path, done: subprocess.CompletedProcess, test_id: str) -> None:
    tail = done.stdout[-4000:]
    assert done.returncode == 2, f"exit status {done.returncode}, expected 2 (interrupted):\n{tail}"
    assert not [sign for sign in CRASH_SIGNS if sign in done.stdout], tail
    assert not list(REPO.glob("core*")) and not list(tmp_path.rglob("core*"))
    report = tmp_path / "report"
    results = json.loads((report / "results.json").read_text())
    assert results["interrupted"] is True and results["exit_status"] == 2 and results["verdict"] == "FAIL"
    assert not [t for t in results["tests"] if test_id in t["id"]], "the interrupted test is listed as finished"
    summary = (report / "loadgen" / test_id / "mlperf_log_summary.txt").read_text()
    assert "Result is :" in summary, "LoadGen did not finish its run"  # it returns only when every query completed
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name], "a staging directory was left behind"


@pytest.mark.parametrize("signum, scenario", [(signal.SIGINT, "SingleStream"), (signal.SIGTERM, "Offline"),
                                              (signal.SIGINT, "Offline")])
def test_a_signal_during_a_600_s_loadgen_scenario_on_the_cpu_stops_the_run_cleanly(tmp_path, signum, scenario):
    """The full profile's scenarios last MLPerf's 600 s: the run ends long before, through LoadGen's own end."""
    done, test_id = _interrupt_suite(tmp_path, signum, ["--hardware", "cpu", "--profile", "full", "--model",
                                                        "widedeep", "-k", f"performance and {scenario}"])
    assert test_id == f"widedeep-fp32-{scenario}"
    _assert_interrupted_report(tmp_path, done, test_id)
    assert re.search(r"KeyboardInterrupt", done.stdout), done.stdout[-2000:]


def test_sigint_during_a_real_time_loadgen_scenario_of_the_simulated_ipu_stops_the_run_cleanly(tmp_path):
    """On the ipu, LoadGen's QSL load computes the emulator's answers in the main thread: the signal may come there."""
    done, test_id = _interrupt_suite(tmp_path, signal.SIGINT, ["--hardware", "ipu", "--profile", "default",
                                                               "--real-time-loadgen", "--model", "widedeep",
                                                               "--precision", "fp16", "-k", "test_performance"])
    _assert_interrupted_report(tmp_path, done, test_id)


# -- the harness alone: every scenario, each in a process of its own ---------------------------------------------------
HARNESS_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    import numpy as np
    from conformance.hardware.devices import ExecutingDevice
    from conformance.perf.harness import ScenarioSettings, run_scenario
    from conformance.perf.interrupts import terminate_as_interrupt

    scenario, signum, log_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    batches = []
    def execute(indices):  # 20 ms a batch, in the dispatcher thread
        time.sleep(0.02)
        batches.append(len(indices))
        return [np.zeros(4, np.float32)] * len(indices)
    terminate_as_interrupt()
    # MLPerf's 600 s; Server's schedule cannot be cut short (LoadGen issues it on its clock): 4 s there
    settings = ScenarioSettings(scenario, min_duration_ms=4000 if scenario == "Server" else 600000,
                                min_query_count=64, performance_sample_count=8, expected_latency_s=0.02,
                                target_qps=100, server_latency_ms=1000)
    threading.Timer(1.0, os.kill, (os.getpid(), signum)).start()
    try:
        run_scenario(ExecutingDevice(execute), settings, log_dir, max_batch=4, batch_timeout_s=0.001)
    except KeyboardInterrupt:
        print(f"KeyboardInterrupt after {len(batches)} device batches")
        sys.exit(2)
    print("the run was not interrupted")
""")


@pytest.mark.parametrize("signum, scenario", [(signal.SIGINT, s) for s in ("SingleStream", "MultiStream", "Server",
                                                                           "Offline")] + [(signal.SIGTERM, "Offline")])
def test_a_signal_during_loadgen_lets_it_finish_then_raises_keyboard_interrupt(tmp_path, signum, scenario):
    done = subprocess.run([sys.executable, "-c", HARNESS_SCRIPT, scenario, str(int(signum)), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=LIMIT_S, preexec_fn=_default_sigint)
    output = done.stdout + done.stderr
    assert done.returncode == 2 and "KeyboardInterrupt after" in done.stdout, output[-3000:]
    assert not [sign for sign in CRASH_SIGNS if sign in output], output[-3000:]
    assert "Result is :" in (tmp_path / "mlperf_log_summary.txt").read_text()


# -- the guard and virtual time, in this process -------------------------------------------------------------------
def _signal_soon(signum: int, after_s: float = 0.2) -> threading.Timer:
    timer = threading.Timer(after_s, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


@pytest.fixture
def python_sigint():
    """SIGINT as Python installs it in a foreground process, whatever this process inherited (a background job of a
    shell starts with SIGINT ignored, and then an ignored signal rightly stays ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_the_guard_calls_back_once_and_raises_after_the_block(python_sigint):
    seen: list[int] = []
    finished = threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts(lambda signum: (seen.append(signum), finished.set())):
            _signal_soon(signal.SIGINT, 0.05)
            assert finished.wait(10), "the signal did not reach the callback"
            time.sleep(0.05)  # Python-level handlers run here: none may raise inside the block
    assert seen == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_raises_keyboard_interrupt_where_the_run_installed_it():
    before = signal.getsignal(signal.SIGTERM)
    restore = terminate_as_interrupt()
    try:
        with pytest.raises(KeyboardInterrupt):
            with deferred_interrupts(lambda signum: None):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_interrupt_stops_a_virtual_time_simulation_and_writes_no_summary(tmp_path, python_sigint):
    device = ServiceTimeDevice(lambda n: (1e-4 * n, 1e-4 * n))
    huge = ScenarioSettings("Server", min_duration_ms=3_600_000, min_query_count=1, target_qps=2000,
                            performance_sample_count=8, server_latency_ms=10)  # 7.2M queries: minutes of simulation
    timer = _signal_soon(signal.SIGINT, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            simulate_scenario(device, huge, tmp_path, max_batch=8, batch_timeout_s=0.002)
    finally:
        timer.cancel()
    assert not (tmp_path / SUMMARY_FILE).exists()


# -- an accuracy run: a batch in flight is abandoned -----------------------------------------------------------------
STOP_BOUND_S = 5.0  # the most a person should wait for Ctrl-C or SIGTERM to end a run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_accuracy_batches_on_workers_stops_within_seconds_and_stores_no_batch_after_it(
        tmp_path, signum):
    """The FP32 batches of conformer beyond the stored references run on a worker, each kept in the cache as it
    finishes: once one is kept (others are in flight), the signal ends the run with exit status 2 within
    STOP_BOUND_S, the batch in flight is not kept, and what is kept is whole (no temporary files)."""
    cache, report = tmp_path / "cache", tmp_path / "report"
    batches = cache / "batches"
    process = subprocess.Popen([sys.executable, "-m", "pytest", "conformance/", "--hardware", "ipu", "--model",
                                "conformer", "--profile", "smoke", "--samples", "conformer=64", "-k",
                                "accuracy and fp16 and not half", "--workers", "1", "--cache-dir", str(cache),
                                "--report-dir", str(report), "-p", "no:randomly", "-p", "no:cacheprovider"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=_default_sigint)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)  # the pipe never fills
    reader.start()
    try:
        deadline = time.monotonic() + LIMIT_S
        while not list(batches.rglob("*.npz")):
            assert process.poll() is None, "the run ended before a batch was kept:\n" + "".join(lines)[-3000:]
            assert time.monotonic() < deadline, "no batch was kept"
            time.sleep(0.05)
        process.send_signal(signum)
        sent, sent_at = time.monotonic(), time.time()
        process.wait(timeout=LIMIT_S)
        stopped_s = time.monotonic() - sent
        reader.join(LIMIT_S)  # every process it started has let go of its output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = "".join(lines)
    assert process.returncode == 2, output[-3000:]
    assert not [sign for sign in CRASH_SIGNS if sign in output], output[-3000:]
    assert stopped_s < STOP_BOUND_S, f"the run took {stopped_s:.1f} s to stop:\n{output[-3000:]}"
    kept = list(batches.rglob("*.npz"))
    assert kept and not [p for p in batches.rglob("*") if p.is_file() and p.suffix != ".npz"]
    late = [p for p in kept if p.stat().st_mtime > sent_at + 0.5]
    assert not late, f"batches kept after the signal: {late}"
    print(f"stopped {stopped_s:.1f} s after {signal.Signals(signum).name}")
