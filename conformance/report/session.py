"""What the plugin's hooks do for the results record, the compliance table, known failures, shards and baselines.

``conformance/plugin.py`` registers a :class:`ReportSession` as a plugin object (its methods are the hooks) and keeps it in
``config.stash``. Under pytest-xdist the
workers collect (xfail marks, shard selection) and run tests; only the controller (or a serial run) gathers the
reports, lists the run's regressions against the baseline and writes the report.

With ``--baseline``, every process that runs tests (a serial run, each xdist worker) also compares each test's records
with the baseline as the test's report is made, and turns a passed test whose figures regressed into a failed one: the
failure then travels like any other to the controller, the terminal summary and ``--junitxml``.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import pytest

from conformance.fileio import write_text_atomic
from conformance.hardware import get_backend
from conformance.report import baseline as baseline_mod
from conformance.report import plots, render, xfails
from conformance.report import record as results_record
from conformance.report.checks import RECORD_KEY
from conformance.report.collect import XFAIL_KEY, Collector
from conformance.report.shard import split
from conformance.targets.regression import load_tolerances
from models import MODEL_NAMES

STALE_KEY = "conformance_stale_xfails"
SUITE_DIR = Path(__file__).resolve().parent.parent


class StaleXfailWarning(pytest.PytestWarning):
    """An entry of the xfail file matches no test of the run: the test was renamed or removed."""


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
    def __init__(self, config, settings):
        self.config = config
        self.settings = settings
        self.shard = settings.shard
        self.xfail_path = settings.xfail_file
        self.baseline_path = settings.baseline
        self.is_worker = hasattr(config, "workerinput")
        self.collector = Collector()
        self.stale: list[dict] = []
        self.baseline = None
        self.tolerances = None
        self.results = None
        try:
            self.xfail_entries = xfails.load(self.xfail_path)
        except ValueError as exc:
            raise pytest.UsageError(f"xfail file: {exc}") from None
        if settings.report_dir is not None:
            check_report_dir(settings.report_dir)
        if self.baseline_path is not None:  # workers too: they compare the records of the tests they run
            try:
                self.tolerances = load_tolerances()
                self.baseline = baseline_mod.load_baseline(self.baseline_path, hardware=settings.hardware,
                                                           profile=settings.profile)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None

    # ----- collection: known failures, then the shard -------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list) -> None:
        """First of all modifyitems hooks, so that staleness is judged on the whole collection (before -k, -m)."""
        node_ids = [item.nodeid for item in items]
        matched = xfails.match(node_ids, self.xfail_entries)
        strict = self.settings.profile_data.strict_xfails
        for item in items:
            entry = matched.get(item.nodeid)
            if entry is None:
                continue
            reason = f"{entry.bucket} ({entry.source}): {entry.reason}"
            if entry.bucket == "unsupported":
                item.add_marker(pytest.mark.skip(reason=reason))
            else:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))
            item.user_properties.append((XFAIL_KEY, entry.to_dict()))
        functions = [(item.nodeid, getattr(item, "originalname", item.name)) for item in items]
        hardware_precisions = get_backend(self.settings.hardware).precisions
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
            if deselected:
                self.config.hook.pytest_deselected(items=deselected)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """xdist controller: the stale xfail entries a worker found (all workers collect the same tests)."""
        output = getattr(node, "workeroutput", None) or {}
        if output.get(STALE_KEY) and not self.stale:
            self.stale = list(output[STALE_KEY])

    # ----- reports ------------------------------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: sees the report after the xfail handling
    def pytest_runtest_makereport(self, item):
        """A passed test whose records regressed against the baseline fails, naming each regressed record (an expected
        failure that passed is left as it is: its regressions still fail the run at the end)."""
        outcome = yield
        report = outcome.get_result()
        if self.baseline is None or report.when != "call" or not report.passed or hasattr(report, "wasxfail"):
            return
        records = [dict(value) for key, value in item.user_properties if key == RECORD_KEY]
        found = baseline_mod.compare_test(records, self.baseline["records"], self.tolerances, self.settings.hardware)
        if found:
            report.outcome = "failed"
            report.longrepr = baseline_mod.failure_message(found, self.baseline_path)

    def pytest_runtest_logreport(self, report) -> None:
        self.collector.add(report)

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.is_worker:
            return
        tests, records = self.collector.tests(), self.collector.records()
        regressions = []
        if self.baseline is not None:
            regressions = [r.to_dict() for r in baseline_mod.compare(records, self.baseline["records"], self.tolerances,
                                                                     self.settings.hardware)]
            if regressions and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        report_dir = self.settings.report_dir
        if report_dir is None and not records and not regressions and not self.stale:
            return
        plot_info = plots.write_plots(report_dir, records) if report_dir is not None else None
        self.results = results_record.build(
            settings=self.settings, backend=get_backend(self.settings.hardware), profile=self.settings.profile_data,
            tests=tests, records=records, exit_status=int(session.exitstatus),
            interrupted=int(exitstatus) == int(pytest.ExitCode.INTERRUPTED), shard=self.shard,
            xfail_file=self.xfail_path, baseline=self.baseline_path, stale_xfails=self.stale, regressions=regressions,
            plots=plot_info,
        )
        if report_dir is not None:
            write_report(report_dir, self.results)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.results is None:
            return
        terminalreporter.section("conformance")
        for line in render.terminal(self.results).rstrip("\n").splitlines():
            terminalreporter.write_line(line)
        if self.settings.report_dir is not None:
            terminalreporter.write_line(f"report: {self.settings.report_dir}/ (results.json, "
                                        f"{', '.join(render.REPORT_FILES)}, plots: {self.results['plots']['status']})")


def write_report(report_dir, results: dict) -> None:
    """The rendered files, then results.json last; every file is replaced atomically."""
    report_dir = Path(report_dir)
    for name, renderer in render.REPORT_FILES.items():
        write_text_atomic(report_dir / name, renderer(results))
    results_record.write(report_dir / results_record.RESULTS_FILE, results)
