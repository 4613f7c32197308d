"""What the plugin's hooks do for the results record, the compliance table, known failures, shards and baselines.

``conformance/plugin.py`` registers a :class:`ReportSession` as a plugin object (its methods are the hooks) and keeps it in
``config.stash``. Under pytest-xdist the
workers collect (xfail marks, shard selection) and run tests; only the controller (or a serial run) gathers the
reports, lists the run's regressions against the baseline and writes the report.

With ``--baseline``, every process that runs tests (a serial run, each xdist worker) also compares each test's records
with the baseline as the test's report is made, and turns a passed test whose figures regressed into a failed one: the
failure then travels like any other to the controller, the terminal summary and ``--junitxml``; the report carries
the ids of the records it names. At the end of the run, every other failure the run as a whole finds is a failed test
case of its own, in pytest's summary and in ``--junitxml`` as well as in the exit status: the regressions no test's
failure names (those of expected failures, of tests that failed for another reason, of records made after the test's
call) as ``<module>::regression of <test>``, and a report that could not be written as ``conformance report``.

With ``--report-dir``, the controller (or a serial run) locks the report directory and stages the run's report in a
directory of its own (:mod:`conformance.report.reportdir`); the tests write their artifacts and LoadGen logs there
(``settings.report_dir`` of the tests is the staging directory; workers are told it), and at the end the report is
rendered into it and swapped in whole. A run that ran no test (``--collect-only``, nothing selected) leaves the
previous report as it was. A report that cannot be written is an internal error (exit 3) naming the path and the
OS error.

The run's verdict and exit status are :func:`conformance.report.record.judge`'s: a run of the suite that judged nothing
(no gated check recorded, e.g. every test skipped by the known-failures file) is NO VERDICT with exit status 5, not a
PASS. A known-failures entry that matches every collected test is a usage error at collection, and a ``--baseline``
that shares no gated check with the finished run refuses the run (exit 4, the previous report kept).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from _pytest.reports import TestReport

from conformance.fileio import write_text_atomic
from conformance.numerics import compiled
from conformance.report import baseline as baseline_mod
from conformance.report import plots, render, xfails
from conformance.report import record as results_record
from conformance.report.checks import RECORD_KEY
from conformance.report.collect import XFAIL_KEY, Collector, encode_properties, junit_properties
from conformance.report.reportdir import INTERRUPTED_SUFFIX, ReportDirBusy, ReportDirectory
from conformance.report.shard import split
from conformance.targets.regression import load_tolerances
from models import MODEL_NAMES

STALE_KEY = "conformance_stale_xfails"
SELECTION_KEY = "conformance_selection"  # workeroutput: how many tests a worker's collection selected and deselected
REFUSED_KEY = "conformance_refused"  # workeroutput: why a worker's collection was refused (a usage error of the run)
KNOWN_FAILURE = pytest.StashKey()  # the xfail entry of a test, judged on its records
STAGING_KEY = "conformance_report_staging"  # workerinput: the staging directory the workers' tests write into
SUITE_DIR = Path(__file__).resolve().parent.parent
NAMED_REGRESSIONS = "conformance_regressions"  # report attribute: the record ids a test's regression failure names
RUN_FAILURE = "conformance_run_failure"  # report attribute: a failed case standing for a failure of the whole run
REPORT_CASE = "conformance report"  # the failed case of a report that could not be written


class StaleXfailWarning(pytest.PytestWarning):
    """An entry of the xfail file matches no test of the run: the test was renamed or removed."""


class BaselineWarning(pytest.PytestWarning):
    """The ``--baseline`` run did not pass, or chose other models or precisions: its comparison says less."""


class ReportDirWarning(pytest.PytestWarning):
    """The run took over the report directory from a run that was killed (a stale lock, leftovers removed)."""


def check_report_dir(path) -> None:
    """Create ``path`` and prove it is writable, before any model runs; a UsageError otherwise."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise pytest.UsageError(f"--report-dir {path}: cannot write there ({exc.strerror or exc})") from None


def collected_whole_suite(items) -> bool:
    """Whether the collection holds every test module of the conformance suite (``conformance/test_*.py``)."""
    suite = {p.resolve() for p in SUITE_DIR.glob("test_*.py")}
    collected = {Path(str(item.path)).resolve() for item in items if getattr(item, "path", None) is not None}
    return bool(suite) and suite <= collected


class ReportSession:
    def __init__(self, config, settings, say=None):
        self.config = config
        self.settings = settings
        self._say = say  # a line of the run's own work after its tests, on the terminal (the plugin's)
        self.shard = settings.shard
        self.xfail_path = settings.xfail_file
        self.baseline_path = settings.baseline
        self.is_worker = hasattr(config, "workerinput")
        self.collector = Collector()
        self.stale: list[dict] = []
        self.baseline = None
        self.baseline_warnings: list[str] = []
        self.tolerances = None
        self.results = None
        self.report_dir = settings.report_dir  # where the report goes (the tests write into the staging directory)
        self.directory: ReportDirectory | None = None  # the locked report directory (controller or serial run)
        self.staging: Path | None = None
        self.write_error: str | None = None
        self.write_exit = pytest.ExitCode.INTERNAL_ERROR
        self._compiled_seen = 0.0  # numba's compile time already said in a progress line
        self.kept_previous = False  # the run was interrupted before any test finished: the previous report stays
        self.put_beside = False  # an interrupted run's partial report went beside the complete one, which stays
        self.dropped_partial: str | None = None  # why an interrupted run's partial report could not go beside it
        self.late_interrupt = False  # an interrupt came once the report was in place: the report stands
        self.deselected: list[str] = []  # node ids that -k or -m (not the shard) left out of the run
        self.selected: int | None = None  # tests the run set out to run (after -k, -m and the shard)
        self._shard_deselecting = False
        # why the run was refused: a worker's known-failure entry matching every test, a baseline that compared nothing
        self.refused: str | None = None
        self.named_regressions: set[str] = set()  # record ids that the failures of the tests themselves name
        self._reporting_case = False  # a run-level failed case is being reported (see pytest_report_teststatus)
        try:
            self.xfail_entries = xfails.load(self.xfail_path)
        except ValueError as exc:
            raise pytest.UsageError(f"xfail file: {exc}") from None
        if settings.report_dir is not None and not self.is_worker:
            check_report_dir(settings.report_dir)
        if self.baseline_path is not None:  # workers too: they compare the records of the tests they run
            try:
                self.tolerances = load_tolerances()
                run = results_record.build(settings=settings, backend=settings.backend, profile=settings.profile_data,
                                           tests=[], records=[], exit_status=0, shard=self.shard)
                self.baseline = baseline_mod.load_baseline(self.baseline_path, run)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
            self.baseline_warnings = baseline_mod.warnings_of(self.baseline_path, self.baseline, run)
            if not self.is_worker:
                for message in self.baseline_warnings:
                    config.issue_config_time_warning(BaselineWarning(message), stacklevel=2)

    # ----- the report directory -----------------------------------------------------------------------------------
    def open(self) -> None:
        """Lock the report directory and create the staging directory the tests write into (a run that will run no
        test, ``--collect-only``, does neither); a worker takes the controller's staging directory. Call
        :meth:`close` at the end (also after an error)."""
        if self.report_dir is None:
            return
        if self.is_worker:
            staging = self.config.workerinput.get(STAGING_KEY)
            self.staging = Path(staging) if staging else None
            return
        if self.config.getoption("collectonly", False):
            return
        directory = ReportDirectory(self.report_dir)
        try:
            directory.acquire()
        except ReportDirBusy as exc:
            raise pytest.UsageError(str(exc)) from None
        except OSError as exc:
            raise pytest.UsageError(f"--report-dir {self.report_dir}: cannot lock it ({exc.strerror or exc})") from None
        self.directory = directory
        try:
            self.staging = directory.stage()
        except OSError as exc:
            raise pytest.UsageError(f"--report-dir {self.report_dir}: cannot create the run's staging directory "
                                    f"({exc.strerror or exc})") from None
        for note in directory.notes:
            self.config.issue_config_time_warning(ReportDirWarning(note), stacklevel=2)

    def close(self) -> None:
        """Drop what is still staged and unlock the report directory."""
        if self.directory is not None:
            self.directory.release()
            self.directory = None

    def test_settings(self):
        """The settings the tests see: their ``report_dir`` is the staging directory of the run."""
        if self.staging is None:
            return self.settings
        return dataclasses.replace(self.settings, report_dir=self.staging,
                                   published_report_dir=self.settings.report_dir)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist controller: tell each worker where the run's report is staged."""
        if self.staging is not None:
            node.workerinput[STAGING_KEY] = str(self.staging)

    # ----- collection: known failures, then the shard -------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list) -> None:
        """First of all modifyitems hooks, so that staleness is judged on the whole collection (before -k, -m)."""
        node_ids = [item.nodeid for item in items]
        try:
            xfails.blanket(self.xfail_entries, node_ids)
        except ValueError as exc:
            if not self.is_worker:
                raise pytest.UsageError(f"xfail file: {exc}") from None
            # a worker runs nothing and tells the controller, which refuses the run (an error raised here would crash
            # the worker)
            self.config.workeroutput[REFUSED_KEY] = f"xfail file: {exc}"
            deselected, items[:] = list(items), []
            self.config.hook.pytest_deselected(items=deselected)
            return
        matched = xfails.match(node_ids, self.xfail_entries)
        for item in items:
            entry = matched.get(item.nodeid)
            if entry is None:
                continue
            if entry.bucket == "unsupported":
                item.add_marker(pytest.mark.skip(reason=f"{entry.bucket} ({entry.source}): {entry.reason}"))
            else:
                item.stash[KNOWN_FAILURE] = entry  # judged on the test's records when it has run
            item.user_properties.append((XFAIL_KEY, entry.to_dict()))
        functions = [(item.nodeid, getattr(item, "originalname", item.name)) for item in items]
        hardware_precisions = self.settings.backend.precisions
        stale = xfails.stale(self.xfail_entries, functions, matched, self.settings.models, MODEL_NAMES,
                             whole_suite=collected_whole_suite(items),
                             precisions=self.settings.precisions,
                             all_precisions=hardware_precisions)
        self.stale = [e.to_dict() for e in stale]
        for entry in stale:  # reported at the entry's line of the xfail file
            filename, _, lineno = entry.source.rpartition(":")
            warnings.warn_explicit(StaleXfailWarning(f"xfail entry {entry.test_id!r} ({entry.source}) matches no test; "
                                                     f"remove it or fix its name"),
                                   StaleXfailWarning, filename, int(lineno))
        if self.is_worker:
            self.config.workeroutput[STALE_KEY] = self.stale
        if self.shard is not None:
            selected, deselected = split(items, self.shard)
            items[:] = selected
            if deselected:  # a shard's share is its settings.shard, not a selection of the run
                self._shard_deselecting = True
                try:
                    self.config.hook.pytest_deselected(items=deselected)
                finally:
                    self._shard_deselecting = False

    def pytest_deselected(self, items) -> None:
        """The tests ``-k`` or ``-m`` left out: a verdict says what it covered."""
        if not self._shard_deselecting:
            self.deselected.extend(item.nodeid for item in items)

    def pytest_collection_finish(self, session) -> None:
        self.selected = len(session.items)
        if self.is_worker:
            self.config.workeroutput[SELECTION_KEY] = {"selected": self.selected, "deselected": self.deselected}

    def selection(self) -> dict:
        """What the run covered (``settings.selection``): the ``-k`` and ``-m`` expressions, how many tests it set out
        to run and how many the expressions deselected."""
        option = self.config.option
        return {"keyword": getattr(option, "keyword", "") or None, "markers": getattr(option, "markexpr", "") or None,
                "selected": self.selected, "deselected": len(self.deselected)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """xdist controller: the stale xfail entries a worker found (all workers collect the same tests)."""
        output = getattr(node, "workeroutput", None) or {}
        if output.get(STALE_KEY) and not self.stale:
            self.stale = list(output[STALE_KEY])
        if output.get(REFUSED_KEY) and self.refused is None:
            self.refused = output[REFUSED_KEY]
        if output.get(SELECTION_KEY) and self.selected is None:  # every worker collects the same tests
            self.selected = output[SELECTION_KEY]["selected"]
            self.deselected = list(output[SELECTION_KEY]["deselected"])

    # ----- reports ------------------------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: sees the report after the xfail handling
    def pytest_runtest_makereport(self, item, call):
        """A passed test whose records regressed against the baseline fails, naming each regressed record (an expected
        failure that passed is left as it is: its regressions still fail the run at the end)."""
        outcome = yield
        report = outcome.get_result()
        report.user_properties = encode_properties(report.user_properties)  # JSON in --junitxml, details once
        entry = item.stash.get(KNOWN_FAILURE, None)
        if entry is not None and report.when == "call":
            self._judge_known_failure(item, call, report, entry)
        if self.baseline is None or report.when != "call" or not report.passed or hasattr(report, "wasxfail"):
            return
        records = [dict(value) for key, value in item.user_properties if key == RECORD_KEY]
        found = baseline_mod.compare_test(records, self.baseline["records"], self.tolerances, self.settings.hardware)
        if found:
            report.outcome = "failed"
            report.longrepr = baseline_mod.failure_message(found, self.baseline_path)
            setattr(report, NAMED_REGRESSIONS, [r.id for r in found])  # plain JSON: travels from xdist workers

    def _judge_known_failure(self, item, call, report, entry) -> None:
        """A test with a known-failure entry: XFAIL when exactly its named gates failed, FAIL for any other failure
        (naming what the entry does not explain), and when it passed XPASS (strict profiles: a failure)."""
        label = f"{entry.bucket} ({entry.source}): {entry.reason}"
        if report.failed:
            records = [dict(value) for key, value in item.user_properties if key == RECORD_KEY]
            raised = call.excinfo is not None and not call.excinfo.errisinstance((pytest.fail.Exception, AssertionError))
            problems = ([f"the test raised {call.excinfo.typename}, not a failed gate"] if raised
                        else entry.unexplained(records))
            if problems:
                report.sections.append(("known failure", f"{entry.test_id} ({entry.source}) names "
                                        f"{', '.join(entry.checks)}; this failure is not it: " + "; ".join(problems)))
                return
            report.outcome = "skipped"
            report.wasxfail = label
        elif report.passed:
            if self.settings.profile_data.strict_xfails:
                report.outcome = "failed"
                report.longrepr = (f"[XPASS(strict)] known failure {entry.test_id} ({entry.source}) passed: remove the "
                                   f"entry (its checks {', '.join(entry.checks)} held). {entry.reason}")
            else:
                report.wasxfail = label

    @pytest.hookimpl(tryfirst=True)  # before junitxml, which writes the teardown report's properties
    def pytest_runtest_logreport(self, report) -> None:
        if getattr(report, RUN_FAILURE, False):
            return  # a failure of the run shown as a test case: not a test of the report
        self.named_regressions.update(getattr(report, NAMED_REGRESSIONS, None) or ())
        self.collector.add(report)
        if report.when == "teardown" and not self.is_worker:
            # a progress line for the suite's tests and any test that records checks; a project's own tests that run
            # with the plugin installed get none
            if self._in_suite(report.nodeid) or any(key == RECORD_KEY for key, _ in report.user_properties):
                self._progress(report.nodeid)
            report.user_properties = junit_properties(report.user_properties)  # collected: the short form for junitxml

    def _progress(self, node_id: str) -> None:
        """One line per finished test (not under ``-q``): what it ran, how long, the verdict."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.get_verbosity() < 0:
            return
        line = self.collector.progress(node_id)
        total = compiled.compile_seconds()
        compiling, self._compiled_seen = total - self._compiled_seen, total
        if line and compiling >= 0.5:  # start-up work charged to this test: said, with its time
            first, _, rest = line.partition("\n")
            line = (f"{first} (of which {compiling:.1f} s compiling the emulator's kernels, once: numba's cache keeps "
                    f"them)" + (f"\n{rest}" if rest else ""))
        if line:  # under pytest's dots: pytest ends the line and writes the file name again before the next dot
            reporter.write(f"\n[conformance] {line}")
            reporter.currentfspath = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        """A run-level failed case counts as failed; while it is being reported nothing is written after the progress
        (it comes after the last test), and the summary then says FAILED as for any test."""
        if self._reporting_case and getattr(report, RUN_FAILURE, False) and report.when == "call":
            return "failed", "", ""
        return None

    def _fail_case(self, node_id: str, message: str) -> None:
        """Report ``node_id`` as a failed test case with ``message``: setup, call (failed) and teardown, as pytest
        reports a test, so that the terminal summary, ``--junitxml`` and other plugins count it like any failure."""
        path, sep, name = node_id.rpartition("::")
        location = (path if sep else "", None, name)
        self._reporting_case = True
        try:
            for when, outcome, longrepr in (("setup", "passed", None), ("call", "failed", message),
                                            ("teardown", "passed", None)):
                report = TestReport(node_id, location, {}, outcome, longrepr, when, **{RUN_FAILURE: True})
                self.config.hook.pytest_runtest_logreport(report=report)
        finally:
            self._reporting_case = False

    def _fail_unnamed_regressions(self, regressions: list[dict], tests: list[dict]) -> None:
        """One failed case per test whose regressions no failure of the test itself names."""
        outcomes = {t["id"]: t["outcome"] for t in tests}
        for test_id, found in baseline_mod.unnamed(regressions, self.named_regressions).items():
            message = baseline_mod.failure_message(found, self.baseline_path)
            if test_id in outcomes:
                message += f" (the test itself: {outcomes[test_id]})"
            self._fail_case(baseline_mod.case_id(test_id, found[0].id), message)

    def _in_suite(self, node_id: str) -> bool:
        """Whether ``node_id`` is a test of the conformance suite (``conformance/test_*.py``)."""
        path = (Path(str(self.config.rootpath)) / node_id.split("::")[0]).resolve()
        return path.parent == SUITE_DIR and path.name.startswith("test_")

    def _conformance_run(self, tests: list[dict], records: list[dict], regressions: list[dict]) -> bool:
        """Whether the run is one the suite judges (and so gives a verdict): it writes a report, recorded checks, ran
        tests of the suite or tests with known-failure entries; a plain pytest run beside the plugin is not."""
        return bool(self.report_dir is not None or records or regressions or self.stale
                    or any(t.get("xfail") for t in tests) or any(self._in_suite(t["id"]) for t in tests))

    def _refuse(self, session, message: str) -> None:
        """The finished run is refused as a usage error (exit 4): no verdict, no report (the previous one stays)."""
        self.refused = message
        if self.directory is not None:
            self.directory.discard()
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        kept = "; the previous report there is unchanged" if self.report_dir is not None else ""
        sys.stderr.write(f"ERROR: conformance: {message}; the run is refused (exit {int(pytest.ExitCode.USAGE_ERROR)})"
                         f"{kept}\n")

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file: the run's failures are test cases in it
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.is_worker:
            return
        if self.refused is not None:  # a worker refused its collection
            self._refuse(session, self.refused)
            return
        tests, records = self.collector.tests(), self.collector.records()
        interrupted = int(exitstatus) == int(pytest.ExitCode.INTERRUPTED)
        if self.baseline is not None and not interrupted and any(r.get("gating", True) for r in records):
            nothing = baseline_mod.compares_nothing(records, self.baseline["records"], self.baseline_path)
            if nothing:
                self._refuse(session, nothing)
                return
        regressions = []
        if self.baseline is not None:
            regressions = [r.to_dict() for r in baseline_mod.compare(records, self.baseline["records"], self.tolerances,
                                                                     self.settings.hardware)]
            if regressions and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self._fail_unnamed_regressions(regressions, tests)
        report_dir = self.report_dir
        if not tests and not (interrupted and self.collector.started()):
            # nothing ran (--collect-only, nothing collected or selected): the previous report stays
            if self.directory is not None:
                self.directory.discard()
            return
        if not self._conformance_run(tests, records, regressions):
            return
        if self.staging is not None:  # the tests named the staging directory: name the report directory instead
            tests, records = _moved(tests, self.staging, report_dir), _moved(records, self.staging, report_dir)
        staging = self.staging if self.directory is not None else None
        plot_info, plot_error = None, None
        if staging is not None and not self.settings.plots:
            plot_info = {"status": "skipped", "reason": plots.NOT_ASKED, "files": {}}
        elif staging is not None:
            try:
                plot_info = plots.write_plots(staging, records, say=self._say)
            except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - raised again below, where it is handled
                plot_error = exc
        self.results = results_record.build(
            settings=self.settings, backend=self.settings.backend, profile=self.settings.profile_data,
            tests=tests, records=records, exit_status=int(session.exitstatus),
            interrupted=interrupted, shard=self.shard,
            xfail_file=self.xfail_path, baseline=self.baseline_path, stale_xfails=self.stale, regressions=regressions,
            plots=plot_info, selection=self.selection(),
        )
        session.exitstatus = self.results["exit_status"]  # the verdict's: 5 when nothing was judged (record.judge)
        if staging is None:
            return
        try:
            if plot_error is not None:
                raise plot_error
            write_report(staging, self.results)
            way = self.directory.commit()
            self.kept_previous, self.put_beside = way == "kept", way == "beside"
            if way == "dropped":
                self.dropped_partial = self.directory.notes[-1]
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the report is written: what is said is what is on disk
            placed = self.directory.placed()
            self.directory.discard()
            self.directory.tidy()
            if placed is not None:  # the new set was in place when the interrupt came: it is the run's report
                self.put_beside, self.late_interrupt = placed == "beside", True
                return
            self.write_error, self.write_exit = "interrupted while the report was written", pytest.ExitCode.INTERRUPTED
            session.exitstatus = pytest.ExitCode.INTERRUPTED
            sys.stderr.write(f"conformance: {self.write_error} to {report_dir}/; the previous report there is "
                             f"unchanged\n")
        except Exception as exc:  # noqa: BLE001 - any failure to write is an internal error, never a verdict
            self.directory.discard()
            self.write_error = f"the report could not be written to {report_dir}/: {_describe_error(exc)}"
            self.write_exit = pytest.ExitCode.INTERNAL_ERROR
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            sys.stderr.write(f"ERROR: conformance: {self.write_error}; the previous report there is unchanged\n")
            self._fail_case(REPORT_CASE, self.write_error)

    def directory_beside(self) -> Path:
        """Where an interrupted run's partial report goes beside a complete one (as the user named the directory)."""
        return Path(str(self.report_dir) + INTERRUPTED_SUFFIX)

    def _as_ended(self) -> dict:
        """The results as the run ended: where the report could not be written, with the exit status the process
        ends with (2 for an interrupt, 3 for an error) and the verdict that follows, so that no line contradicts it."""
        if self.write_error is None:
            return self.results
        ended = dict(self.results, exit_status=int(self.write_exit),
                     interrupted=self.results["interrupted"] or self.write_exit == pytest.ExitCode.INTERRUPTED)
        judgement = results_record.judgement_of(ended)
        ended.update(verdict=judgement.verdict, exit_status=judgement.exit_status)
        return ended

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.refused is not None:
            terminalreporter.section("conformance")
            terminalreporter.write_line(f"conformance REFUSED: {self.refused} (exit status "
                                        f"{int(pytest.ExitCode.USAGE_ERROR)})", red=True, bold=True)
            return
        if self.results is None:
            return
        terminalreporter.section("conformance")
        width = render.terminal_width(getattr(terminalreporter._tw, "_file", None))  # where pytest writes
        text = render.terminal(self._as_ended(), detailed=self.config.get_verbosity() > 0,
                               width=width).rstrip("\n").splitlines()
        for line in text[:-1]:
            terminalreporter.write_line(line)
        for message in self.baseline_warnings:  # beside the verdict too, not only among pytest's warnings
            for line in render.wrap(f"WARNING: {message}", width, "  "):
                terminalreporter.write_line(line, yellow=True)
        if self.write_error is not None:
            terminalreporter.write_line(f"report: NOT written: {self.write_error} (exit status "
                                        f"{int(self.write_exit)})", red=True, bold=True)
        elif self.kept_previous:
            terminalreporter.write_line(f"report: NOT written: the run was interrupted before any test finished; the "
                                        f"previous report in {self.report_dir}/ is unchanged", yellow=True)
        elif self.dropped_partial is not None:
            terminalreporter.write_line(f"report: NOT written: {self.dropped_partial}; the complete report in "
                                        f"{self.report_dir}/ is unchanged", yellow=True)
        elif self.put_beside:
            terminalreporter.write_line(f"report: this interrupted run's partial report is in {self.directory_beside()}/;"
                                        f" the complete report in {self.report_dir}/ is unchanged", yellow=True)
        elif self.report_dir is not None:
            terminalreporter.write_line(f"report: {self.report_dir}/ (results.json, "
                                        f"{', '.join(render.REPORT_FILES)}, plots: {self.results['plots']['status']})")
        if self.late_interrupt:
            terminalreporter.write_line("an interrupt came once the report was in place; the run ends as its report "
                                        f"says (exit status {self.results['exit_status']})", yellow=True)
        verdict = self._as_ended()["verdict"]
        if verdict == results_record.NO_VERDICT:
            reasons = "; ".join(results_record.judgement_of(self.results).reasons)
            terminalreporter.write_line(f"{reasons}: no verdict (exit status {results_record.EXIT_NO_VERDICT})",
                                        yellow=True)
        passed = verdict == "PASS"  # the verdict last, after the tables
        failed = verdict == "FAIL"
        terminalreporter.write_line(text[-1], green=passed, red=failed, yellow=not passed and not failed, bold=True)


def _describe_error(exc: BaseException) -> str:
    """An OSError as ``<path>: <strerror> (errno N)``; anything else as its type and message."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror} (errno {exc.errno})"
    return f"{type(exc).__name__}: {exc}"


def _moved(value, staging: Path, report_dir: Path):
    """``value`` (tests or records) with every path into the staging directory made relative to the report (``loadgen/
    resnet50-fp8-Offline``; the directory itself is ``.``): results.json holds no path of the machine that wrote it."""
    old = str(staging)
    if isinstance(value, str):
        if old not in value:
            return value
        return value.replace(old + os.sep, "").replace(old, ".")
    if isinstance(value, dict):
        return {k: _moved(v, staging, report_dir) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_moved(v, staging, report_dir) for v in value]
    return value


def write_report(report_dir, results: dict) -> None:
    """The rendered files, then results.json last; every file is replaced atomically."""
    report_dir = Path(report_dir)
    for name, renderer in render.REPORT_FILES.items():  # the page embeds the plots already written there
        text = renderer(results, plots_dir=report_dir) if name == render.HTML_FILE else renderer(results)
        write_text_atomic(report_dir / name, text)
    results_record.write(report_dir / results_record.RESULTS_FILE, results)
