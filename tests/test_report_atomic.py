"""Reports are whole or absent: the report set is staged and swapped in at once, a run that runs nothing leaves the
previous report alone, a running run holds its report directory (a second run is refused, a stale lock is taken over),
and a report that cannot be written is exit 3 with the previous set intact and nothing left behind -- also when the
run is killed while writing."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.report import record, render, reportdir, session
from tests.sample_results import sample_file

# the real fixtures; the environment makes a run kill itself while it writes its report
CONFTEST = """
import os, signal
from conformance.conftest import record_check, settings  # noqa: F401  (the real fixtures)
from conformance.report import render, reportdir

if os.environ.get("KILL_DURING_REPORT"):  # SIGKILL after compliance.md, while results.csv is being rendered
    def _killed(results):
        os.kill(os.getpid(), signal.SIGKILL)
    render.REPORT_FILES["results.csv"] = _killed

if os.environ.get("KILL_AFTER_SWAP"):  # SIGKILL once the new set is in place, before the previous one is removed
    _exchange = reportdir.exchange_paths
    def _exchange_then_die(a, b):
        _exchange(a, b)
        if os.path.basename(b) == "out":
            os.kill(os.getpid(), signal.SIGKILL)
    reportdir.exchange_paths = _exchange_then_die

if os.environ.get("TERM_IN_SWAP"):  # SIGTERM to the run just as the new set is swapped in
    _exchange_in_swap = reportdir.exchange_paths
    def _exchange_then_term(a, b):
        if os.path.basename(b) == "out" and os.environ["TERM_IN_SWAP"] == "before":
            os.kill(os.getpid(), signal.SIGTERM)
        _exchange_in_swap(a, b)
        if os.path.basename(b) == "out" and os.environ["TERM_IN_SWAP"] == "after":
            os.kill(os.getpid(), signal.SIGTERM)
    reportdir.exchange_paths = _exchange_then_term

if os.environ.get("TERM_AT") == "start":  # SIGTERM once the tests are collected, before the first one starts
    def pytest_collection_finish(session):
        os.kill(os.getpid(), signal.SIGTERM)
"""

SUITE = """
import os, pathlib, shutil, signal, time

HERE = pathlib.Path(__file__).parent


def _terminated_in(test):  # SIGTERM to this run in the middle of ``test``
    if os.environ.get("TERM_AT") == test:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)


def test_accuracy(record_check, settings):
    _terminated_in("accuracy")
    details = {}
    if settings.report_dir is not None:  # a LoadGen-like log, written while the test runs
        log = pathlib.Path(settings.report_dir) / "loadgen" / "case" / "log.txt"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(os.environ.get("RUN_NAME", "run"))
        details["log_dir"] = str(log.parent)
    record_check(kind="accuracy", model="resnet50", precision="fp16", check="snr_db",
                 value=float(os.environ.get("SNR", "30")), target=20.0, op=">=", units="dB", details=details)


def test_other(settings):
    _terminated_in("other")
    if os.environ.get("WAIT_FOR_GATE"):  # hold the report directory until the test lets go
        (HERE / "waiting").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not (HERE / "gate").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if os.environ.get("BREAK_REPORT_DIR"):  # the place the report is written becomes unusable
        staging = pathlib.Path(settings.report_dir)
        shutil.rmtree(staging)
        staging.write_text("not a directory any more")
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    for name in ("KILL_DURING_REPORT", "KILL_AFTER_SWAP", "WAIT_FOR_GATE", "BREAK_REPORT_DIR", "RUN_NAME", "SNR",
                 "TERM_AT", "TERM_IN_SWAP"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    return pytester


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones too) -> its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(suite) -> list[str]:
    """The suite's own temporary entries beside and inside the report directory (none after a finished run)."""
    beside = [p.name for p in suite.path.iterdir() if ".conformance-" in p.name]
    inside = [p.name for p in (suite.path / "out").iterdir() if p.name.startswith(".conformance")]
    return sorted(beside + inside)


def first_report(suite, monkeypatch) -> dict[str, bytes]:
    monkeypatch.setenv("RUN_NAME", "previous")
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == 0
    assert leftovers(suite) == []
    before = snapshot(suite.path / "out")
    assert {"results.json", "compliance.md", "results.csv", "results.html", "loadgen/case/log.txt"} <= set(before)
    return before


def test_new_set_replaces_the_previous_one_whole_and_keeps_other_files(suite, monkeypatch):
    out = suite.path / "out"
    first_report(suite, monkeypatch)
    results = json.loads((out / "results.json").read_text())
    assert results["records"][0]["details"]["log_dir"] == "loadgen/case"  # relative to the report, not the staging directory
    out.joinpath("notes.txt").write_text("mine")
    out.joinpath("artifacts").mkdir()
    out.joinpath("artifacts", "stale.npz").write_text("from an older run")  # part of a report: replaced
    inode = out.stat().st_ino

    monkeypatch.setenv("RUN_NAME", "second")
    monkeypatch.setenv("SNR", "25")
    result = suite.runpytest("--report-dir", "out", "--junitxml", "out/junit.xml")
    assert result.ret == 0
    assert out.stat().st_ino != inode, "the directory was swapped as a whole"
    assert json.loads((out / "results.json").read_text())["records"][0]["value"] == 25.0
    assert (out / "loadgen" / "case" / "log.txt").read_text() == "second"
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "junit.xml").is_file()
    assert not (out / "artifacts").exists(), "entries of the previous report do not survive into the new one"
    assert leftovers(suite) == [] and not (out / reportdir.LOCK_FILE).exists()


def test_directory_with_directories_of_its_own_gets_the_set_entry_by_entry(suite, monkeypatch):
    out = suite.path / "out"
    first_report(suite, monkeypatch)
    out.joinpath("mine").mkdir()
    out.joinpath("mine", "data.txt").write_text("kept")
    inode = out.stat().st_ino
    monkeypatch.setenv("RUN_NAME", "second")
    assert suite.runpytest("--report-dir", "out").ret == 0
    assert out.stat().st_ino == inode, "left in place: its own directories are not copied"
    assert (out / "mine" / "data.txt").read_text() == "kept"
    assert (out / "loadgen" / "case" / "log.txt").read_text() == "second"
    assert leftovers(suite) == []


def test_working_directory_as_report_dir_is_not_replaced(suite):
    inode = suite.path.stat().st_ino
    assert suite.runpytest("--report-dir", ".").ret == 0
    assert suite.path.stat().st_ino == inode and (suite.path / "test_suite.py").is_file()
    assert json.loads((suite.path / "results.json").read_text())["records"][0]["details"]["log_dir"] == "loadgen/case"
    assert not [p.name for p in suite.path.iterdir() if p.name.startswith(".conformance")]


@pytest.mark.parametrize("args", [["--collect-only"], ["--co"], ["-k", "no_such_test"], ["--co", "-n", "2"]],
                         ids=["collect-only", "co", "nothing-selected", "co-xdist"])
def test_run_that_runs_nothing_keeps_the_report(suite, monkeypatch, args):
    if "-n" in args:
        pytest.importorskip("xdist")
        args = ["-p", "xdist", *args]
    before = first_report(suite, monkeypatch)
    mtime = (suite.path / "out" / "results.json").stat().st_mtime_ns
    result = suite.runpytest("--report-dir", "out", *args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    assert snapshot(suite.path / "out") == before
    assert (suite.path / "out" / "results.json").stat().st_mtime_ns == mtime
    assert leftovers(suite) == []


@pytest.mark.parametrize("at", ["start", "accuracy"], ids=["after-collection", "in-the-first-test"])
def test_sigterm_before_any_test_finished_keeps_the_previous_report(suite, monkeypatch, at):
    """Interrupted before any test finished, a run has nothing to report: the previous report, its logs and plots
    too, stays as it was (exit 2, the run's staging directory removed)."""
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv("TERM_AT", at)
    monkeypatch.setenv("RUN_NAME", "interrupted")
    result = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert snapshot(suite.path / "out") == before
    assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()


def test_sigterm_after_a_test_finished_keeps_the_complete_report_and_puts_the_partial_one_beside(suite, monkeypatch):
    """A finished test is something to report, but never in place of a complete report: the interrupted run's
    partial set (FAIL, exit 2) goes to ``out.interrupted`` (a later one replaces it there), the complete report stays
    in ``out`` and the terminal names both; a directory holding only an interrupted report gets the new one in place;
    into an empty directory, an interruption in the first test leaves its set (the logs of the test it stopped)."""
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv("TERM_AT", "other")
    for name in ("interrupted", "interrupted again"):
        monkeypatch.setenv("RUN_NAME", name)
        result = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
        assert result.ret == pytest.ExitCode.INTERRUPTED
        result.stdout.fnmatch_lines(["report: this interrupted run's partial report is in out.interrupted/; the "
                                     "complete report in out/ is unchanged"])
        assert snapshot(suite.path / "out") == before
        results = json.loads((suite.path / "out.interrupted" / "results.json").read_text())
        assert results["interrupted"] and results["verdict"] == "FAIL" and results["exit_status"] == 2
        assert [t["id"] for t in results["tests"]] == ["test_suite.py::test_accuracy"]
        assert (suite.path / "out.interrupted" / "loadgen" / "case" / "log.txt").read_text() == name
        assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()

    (suite.path / "out.interrupted").rename(suite.path / "partial")
    (suite.path / "out.interrupted").write_text("a file of the user's")  # not a report: never replaced
    result = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["report: NOT written: this interrupted run's partial report could not be put beside "
                                 "the complete one (out.interrupted: exists and is not a report directory); the "
                                 "complete report in out/ is unchanged"])
    assert snapshot(suite.path / "out") == before
    assert (suite.path / "out.interrupted").read_text() == "a file of the user's"
    assert leftovers(suite) == []
    result = suite.runpytest_subprocess("--report-dir", "partial", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["report: partial/ (results.json, *"])
    assert (suite.path / "partial" / "loadgen" / "case" / "log.txt").read_text() == "interrupted again"
    assert not (suite.path / "partial.interrupted").exists()

    monkeypatch.setenv("TERM_AT", "accuracy")
    assert suite.runpytest_subprocess("--report-dir", "fresh", "-p", "no:randomly").ret == pytest.ExitCode.INTERRUPTED
    results = json.loads((suite.path / "fresh" / "results.json").read_text())
    assert results["interrupted"] and results["tests"] == [] and results["exit_status"] == 2


def _fail_results_write(monkeypatch):
    def no_space(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr("conformance.report.record.write_text_atomic", no_space)


def _fail_second_rendered_file(monkeypatch):
    real, calls = session.write_text_atomic, []

    def flaky(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error", str(path))
        real(path, text)
    monkeypatch.setattr(session, "write_text_atomic", flaky)


def _fail_swap(monkeypatch):
    real = reportdir.exchange_paths

    def broken(a, b):
        if Path(b).name == "out":
            raise OSError(errno.EIO, "Input/output error", str(a), None, str(b))
        real(a, b)
    monkeypatch.setattr(reportdir, "exchange_paths", broken)


@pytest.mark.parametrize("break_it, message", [
    (_fail_results_write, "*results.json: No space left on device (errno 28)*"),
    (_fail_second_rendered_file, "*results.csv: Input/output error (errno 5)*"),
    (_fail_swap, "*.out.conformance-staging-*: Input/output error (errno 5)*"),
], ids=["results-json", "rendered-file", "swap"])
def test_write_failure_is_exit_3_and_keeps_the_previous_set(suite, monkeypatch, break_it, message):
    before = first_report(suite, monkeypatch)
    break_it(monkeypatch)
    monkeypatch.setenv("SNR", "25")
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stderr.fnmatch_lines(["ERROR: conformance: the report could not be written to out/: " + message])
    result.stdout.fnmatch_lines(["report: NOT written: *(exit status 3)"])
    assert snapshot(suite.path / "out") == before
    assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()


def test_report_dir_unusable_at_the_end_is_exit_3(suite, monkeypatch):
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv("BREAK_REPORT_DIR", "1")
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stderr.fnmatch_lines(["ERROR: conformance: the report could not be written to out/: "
                                 "*.out.conformance-staging-*: File exists (errno 17)*"])
    assert snapshot(suite.path / "out") == before
    assert leftovers(suite) == []


def _lock_text(pid: int) -> str:
    return json.dumps({"pid": pid, "host": socket.gethostname(), "started": "2000-01-01T00:00:00Z"})


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("point", ["KILL_DURING_REPORT", "KILL_AFTER_SWAP"])
def test_kill_while_writing_leaves_a_whole_set_and_the_next_run_cleans_up(suite, monkeypatch, point):
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv(point, "1")
    monkeypatch.setenv("RUN_NAME", "killed")
    killed = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
    assert killed.ret == -signal.SIGKILL
    after = snapshot(suite.path / "out")
    lock = json.loads(after.pop(reportdir.LOCK_FILE))  # the killed run's lock, nothing else of it
    if point == "KILL_DURING_REPORT":
        assert after == {k: v for k, v in before.items() if k != reportdir.LOCK_FILE}, "the previous set, untouched"
    else:  # the new set, whole
        assert after["loadgen/case/log.txt"] == b"killed"
        assert set(after) == set(before)
        assert json.loads(after["results.json"])["created"]
    left = [name for name in leftovers(suite) if name != reportdir.LOCK_FILE]
    assert left and all(name.startswith(".out.conformance-staging-") for name in left)

    monkeypatch.delenv(point)
    monkeypatch.setenv("RUN_NAME", "next")
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        f"*ReportDirWarning: --report-dir out: took over the stale lock out/.conformance.lock (pid {lock['pid']} on *"
        f"no longer running)*",
        "*ReportDirWarning: --report-dir out: removed what an interrupted run left: *.out.conformance-staging-*",
    ])
    assert (suite.path / "out" / "loadgen" / "case" / "log.txt").read_text() == "next"
    assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()


@pytest.mark.parametrize("content, said", [
    (None, "pid {pid} on *, since 2000-01-01T00:00:00Z; no longer running"),
    ("garbage", "unrecognised contents 'garbage'; no longer holding it"),
], ids=["dead-pid", "unrecognised"])
def test_stale_lock_is_taken_over_and_said_so(suite, content, said):
    pid = dead_pid()
    out = suite.path / "out"
    out.mkdir()
    out.joinpath(reportdir.LOCK_FILE).write_text(content if content is not None else _lock_text(pid))
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*took over the stale lock out/.conformance.lock ({said.format(pid=pid)})*"])
    assert (out / "results.json").is_file() and not (out / reportdir.LOCK_FILE).exists()


def test_second_run_into_a_held_report_dir_is_refused(suite, monkeypatch):
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv("WAIT_FOR_GATE", "1")
    monkeypatch.setenv("RUN_NAME", "holder")
    holder = suite.popen([sys.executable, "-m", "pytest", "-p", "no:randomly", "--report-dir", "out"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (suite.path / "waiting").exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holding run did not start its tests"
            time.sleep(0.05)
        monkeypatch.delenv("WAIT_FOR_GATE")
        monkeypatch.setenv("RUN_NAME", "refused")
        refused = suite.runpytest("--report-dir", "out")
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        refused.stderr.fnmatch_lines([f"ERROR: --report-dir out: another run is writing its report there "
                                      f"(pid {holder.pid} on {socket.gethostname()}, since *; lock "
                                      f"out/.conformance.lock); wait for it to finish or choose another directory"])
        assert not (suite.path / "ran-refused").exists()
        during = snapshot(suite.path / "out")
        assert json.loads(during.pop(reportdir.LOCK_FILE))["pid"] == holder.pid
        assert during == before  # the holder stages its report elsewhere until the end
        # collecting needs no lock and touches nothing
        assert suite.runpytest("--report-dir", "out", "--co").ret == 0
    finally:
        suite.path.joinpath("gate").touch()
        output = holder.communicate(timeout=120)[0].decode()
    assert holder.returncode == 0, output
    assert (suite.path / "out" / "loadgen" / "case" / "log.txt").read_text() == "holder"
    assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()


def test_entry_by_entry_where_directories_cannot_be_exchanged(suite, monkeypatch):
    """A file system without an atomic exchange (or a report directory that is a mount point): staged inside the
    report directory and moved in one entry at a time, results.json last; the result is the same set."""
    first_report(suite, monkeypatch)
    (suite.path / "out" / "notes.txt").write_text("mine")
    monkeypatch.setattr(reportdir.ReportDirectory, "_can_exchange", lambda self, staging: False)
    monkeypatch.setenv("RUN_NAME", "entries")
    monkeypatch.setenv("SNR", "26")
    assert suite.runpytest("--report-dir", "out").ret == 0
    out = suite.path / "out"
    assert json.loads((out / "results.json").read_text())["records"][0]["value"] == 26.0
    assert (out / "loadgen" / "case" / "log.txt").read_text() == "entries"
    assert (out / "notes.txt").read_text() == "mine"
    assert leftovers(suite) == []


def test_entry_by_entry_failure_midway_puts_the_previous_set_back(suite, monkeypatch):
    before = first_report(suite, monkeypatch)
    monkeypatch.setattr(reportdir.ReportDirectory, "_can_exchange", lambda self, staging: False)
    real_rename = os.rename

    def rename(source, target):
        if Path(target).name == "results.html" and ".conformance-staging-" in str(source):
            raise OSError(errno.EIO, "Input/output error", str(source), None, str(target))
        real_rename(source, target)
    monkeypatch.setattr(reportdir.os, "rename", rename)
    monkeypatch.setenv("RUN_NAME", "broken")
    result = suite.runpytest("--report-dir", "out")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stderr.fnmatch_lines(["*could not be written to out/: *results.html: Input/output error (errno 5)*"])
    assert snapshot(suite.path / "out") == before
    assert leftovers(suite) == []


def test_exchange_refused_at_the_end_falls_back_to_entries(suite, monkeypatch):
    first_report(suite, monkeypatch)
    real = reportdir.exchange_paths

    def no_exchange_of_the_report(a, b):
        if Path(b).name == "out":
            raise OSError(errno.EINVAL, "Invalid argument", str(a), None, str(b))
        real(a, b)
    monkeypatch.setattr(reportdir, "exchange_paths", no_exchange_of_the_report)
    monkeypatch.setenv("RUN_NAME", "fallback")
    assert suite.runpytest("--report-dir", "out").ret == 0
    assert (suite.path / "out" / "loadgen" / "case" / "log.txt").read_text() == "fallback"
    assert leftovers(suite) == []


def test_xdist_workers_write_into_the_staged_set(suite):
    pytest.importorskip("xdist")
    result = suite.runpytest_subprocess("-p", "xdist", "-n", "2", "--report-dir", "out")
    assert result.ret == 0
    out = suite.path / "out"
    assert (out / "loadgen" / "case" / "log.txt").read_text() == "run"
    assert json.loads((out / "results.json").read_text())["records"][0]["details"]["log_dir"] == "loadgen/case"  # relative to the report
    assert leftovers(suite) == []


def test_report_command_write_errors_are_exit_3(tmp_path, capsys, monkeypatch):
    sample = str(sample_file(tmp_path))
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert cli_main(["report", sample, "--format", "md", "--out", str(directory)]) == 3
    assert f"ipu-conformance report: error: cannot write {directory}: Is a directory" in capsys.readouterr().err
    blocked = tmp_path / "file" / "merged.json"
    (tmp_path / "file").write_text("")
    assert cli_main(["report", sample, "--out", str(tmp_path / "ok.md"), "--merged-json", str(blocked)]) == 3
    assert f"cannot write {blocked}: " in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path)]) == 4  # unusable input: a directory, not a results file
    assert cli_main(["report", sample]) == 1  # the sample's verdict

    def broken(results):
        raise RuntimeError("renderer bug")
    monkeypatch.setitem(render.FORMATS, "terminal", broken)
    assert cli_main(["report", sample]) == 3  # a bug is an internal error, not a verdict
    assert "ipu-conformance report: internal error" in capsys.readouterr().err


class _Interrupter:
    """Raises KeyboardInterrupt (as a SIGINT or SIGTERM handler does) before or after the ``step``-th step of writing
    and swapping in a report: each file written, each rename, exchange, link, lock, chmod and removal."""

    OS_STEPS = ("rename", "chmod", "pwrite", "close", "unlink", "link", "rmdir")

    def __init__(self, monkeypatch, when: str):
        self.when, self.step, self.count, self.active = when, 0, 0, False
        for module, name in ((session, "write_text_atomic"), (record, "write_text_atomic"),
                             (reportdir, "exchange_paths"), (reportdir, "_carry"), (reportdir, "_lock"),
                             (reportdir, "_remove")):
            monkeypatch.setattr(module, name, self.counted(getattr(module, name)))
        real_write = session.write_report

        def write_report(*args):
            self.active = True  # the steps counted are those of writing and swapping in the report
            return real_write(*args)
        monkeypatch.setattr(session, "write_report", write_report)
        real_release = reportdir.ReportDirectory.release

        def release(directory):
            self.active = False  # the run is over: letting go of the directory is not a step of the swap
            return real_release(directory)
        monkeypatch.setattr(reportdir.ReportDirectory, "release", release)
        interrupter = self

        class CountedOs:
            def __getattr__(self, name):
                found = getattr(os, name)
                return interrupter.counted(found) if name in interrupter.OS_STEPS else found
        monkeypatch.setattr(reportdir, "os", CountedOs())

    def counted(self, function):
        def step(*args, **kwargs):
            if not self.active:
                return function(*args, **kwargs)
            self.count += 1
            here = self.count == self.step
            if here and self.when == "before":
                raise KeyboardInterrupt(f"step {self.step}")
            result = function(*args, **kwargs)
            if here:
                raise KeyboardInterrupt(f"step {self.step}")
            return result
        return step

    def arm(self, step: int) -> None:
        self.step, self.count, self.active = step, 0, False


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("mode", ["swap", "entries"])
def test_an_interrupt_at_each_step_of_the_swap_is_told_as_the_disk_holds_it(suite, monkeypatch, mode, when):
    """At every step of writing and swapping in the report, an interrupt leaves either the previous report whole
    (said: NOT written, the previous one unchanged; exit 2 and no line saying otherwise) or the new one whole (said:
    the report, the exit status its results.json gives), and nothing of the run's own behind. The interrupt comes
    just before each step, or just after it, before the code that did it has noted it."""
    out = suite.path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("kept across runs")
    if mode == "entries":  # a directory of the user's own: the entries are moved in one at a time
        (out / "mine").mkdir()
        (out / "mine" / "file").write_text("mine")
    before = first_report(suite, monkeypatch)
    monkeypatch.setenv("RUN_NAME", "new")
    monkeypatch.setenv("SNR", "25")
    interrupter = _Interrupter(monkeypatch, when)
    seen = set()
    step = 0
    while True:
        step += 1
        interrupter.arm(step)
        try:
            result = suite.runpytest("--report-dir", "out")
        except KeyboardInterrupt:  # pragma: no cover - the run must have handled it
            pytest.fail(f"step {step} ({when}): the interrupt escaped the run")
        if interrupter.count < step:  # every step done without an interrupt: the run is over
            assert result.ret == 0
            break
        text = result.stdout.str()
        assert "Traceback" not in text
        results = json.loads((out / "results.json").read_text())
        new = results["records"][0]["value"] == 25
        seen.add(new)
        if new:
            assert result.ret == results["exit_status"] == 0, f"step {step}"
            result.stdout.fnmatch_lines(["report: out/ (results.json, *",
                                         "an interrupt came once the report was in place; the run ends as its "
                                         "report says (exit status 0)", "conformance PASS: *"])
            assert (out / "loadgen" / "case" / "log.txt").read_text() == "new"
            assert (out / "notes.txt").read_text() == "kept across runs"
        else:
            assert result.ret == pytest.ExitCode.INTERRUPTED, f"step {step}"
            result.stdout.fnmatch_lines(["created: *, exit status 2",
                                         "report: NOT written: interrupted while the report was written (exit "
                                         "status 2)", "conformance FAIL: *"])
            assert "exit status 0" not in text and "conformance PASS" not in text
            assert snapshot(out) == before, f"step {step}: the previous report, whole"
        assert leftovers(suite) == [] and not (out / reportdir.LOCK_FILE).exists(), f"step {step}"
    assert step > 8 and seen == {True, False}


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigterm_just_as_the_report_is_swapped_in_is_held_until_the_swap_is_done(suite, monkeypatch, when):
    """A real SIGTERM during the swap waits for the swap's end: the new report is in place, whole, and the terminal
    and the exit status say so (the run ends as its report says)."""
    first_report(suite, monkeypatch)
    monkeypatch.setenv("TERM_IN_SWAP", when)
    monkeypatch.setenv("RUN_NAME", "new")
    result = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
    results = json.loads((suite.path / "out" / "results.json").read_text())
    assert (suite.path / "out" / "loadgen" / "case" / "log.txt").read_text() == "new"
    assert result.ret == results["exit_status"] == 0
    result.stdout.fnmatch_lines(["created: *, exit status 0", "report: out/ (results.json, *",
                                 "an interrupt came once the report was in place; the run ends as its report says "
                                 "(exit status 0)", "conformance PASS: *"])
    assert "NOT written" not in result.stdout.str() + result.stderr.str()
    assert leftovers(suite) == [] and not (suite.path / "out" / reportdir.LOCK_FILE).exists()
