"""pytest plugin of the conformance suite: its options (generated from :data:`conformance.settings.OPTIONS`) and hooks
only; the options are parsed and checked in :mod:`conformance.settings`, the report is :mod:`conformance.report`'s."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from conformance.numerics import heap
from conformance.accuracy import reference
from conformance.datasets.cache import default_directory, scale_cache, weight_cache
from conformance.datasets.user import UserInputError, load_cases
from conformance.numerics import arrays
from conformance.perf.interrupts import terminate_as_interrupt
from conformance.report.session import ReportSession
from conformance.settings import OPTIONS, SettingsError, settle
from conformance.settings.checks import check_engine, check_runnable
from conformance.settings.session import (
    SETTINGS_KEY,
    USER_CASES_KEY,
    header_lines,
    progress_line,
    run_settings,
    user_cases,
)
from conformance.targets import DataFileError
from conformance.timings import RunClock
from models.base import use_seeded_weight_store

REPORT_KEY = pytest.StashKey[ReportSession]()
# an extra case's test module, collected only when the case runs
EXTRA_CASE_MODULES = {"test_minilm.py": "minilm"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "IPU conformance suite")
    for option in OPTIONS:
        group.addoption(option.flag, **option.arguments())


def pytest_configure(config: pytest.Config) -> None:
    """Check every option, environment variable and data file before any test runs, then open the report; what is
    not valid is a usage error naming the option, variable or file (line and key)."""
    try:
        _configure(config)
    except (SettingsError, DataFileError, UserInputError) as exc:
        raise pytest.UsageError(str(exc)) from None


def _configure(config: pytest.Config) -> None:
    settings = settle(config.getoption)
    heap.keep_freed_memory()  # the emulator's large temporaries reuse freed pages (conformance/numerics/heap.py)
    previous_array = arrays.active().spec
    arrays.select(settings.array)  # the emulator's numerics compute on it from here on
    config.add_cleanup(lambda: arrays.select(previous_array))  # a run inside a process (pytester) leaves it as it was
    check_engine(settings, config.getoption("numprocesses", None))  # pytest-xdist's -n, when it is installed
    check_runnable(settings)
    # seeded weights are built once per machine and kept in the cache directory (before the user's cases load models)
    previous = use_seeded_weight_store(weight_cache(config.getoption("cache_dir")))
    config.add_cleanup(lambda: use_seeded_weight_store(previous))
    settings.backend.scale_store = scale_cache(config.getoption("cache_dir"))  # and calibrated FP8 scales
    settings.backend.say = lambda line: progress_line(config, line)
    # the user's checkpoints and data are read and checked before any test runs
    cases = load_cases(settings.models, settings.checkpoints, settings.datasets, settings.samples,
                       settings.calibrations, settings.allow_unused_weights,
                       say=lambda line: progress_line(config, line))
    config.stash[USER_CASES_KEY] = cases
    # the stored FP32 references of the other models are readable and what the manifest says (a ReferenceError is a
    # DataFileError: a usage error naming the file)
    reference.check_files([name for name in settings.models if name not in cases and reference.ships(name)])
    config.add_cleanup(terminate_as_interrupt())  # SIGTERM stops the run as Ctrl-C does: exit 2, the report written
    config.pluginmanager.register(PromptInterrupt(config), "conformance-interrupt")
    if not hasattr(config, "workerinput"):  # pytest-xdist's workers: their controller says the run's time
        directory = config.getoption("cache_dir") or default_directory()
        timings = Path(directory) / "timings" / f"{settings.hardware}-{settings.profile}.json"
        config.pluginmanager.register(RunClock(lambda line: _say(config, line), timings), "conformance-clock")
    # the report's hooks (collection, reports, session finish, terminal summary) are methods of this object
    report = ReportSession(config, settings, say=lambda line: _say(config, line))
    config.stash[REPORT_KEY] = report
    config.add_cleanup(report.close)
    report.open()  # last: locks the report directory (released by the cleanup, whatever happens next)
    config.pluginmanager.register(report, "conformance-report")
    # the tests write their artifacts and LoadGen logs into the run's staging directory (settings.report_dir)
    config.stash[SETTINGS_KEY] = report.test_settings()


def _say(config: pytest.Config, line: str) -> None:
    """A line of the run's clock, under pytest's dots as the tests' own lines are (not with ``-q``)."""
    if config.get_verbosity() < 0:
        return
    progress_line(config, line)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.currentfspath = None  # pytest writes the file name again before the next dot


class PromptInterrupt:
    """Ctrl-C and SIGTERM stop the run within seconds. Two costs of an interrupt do not depend on the run's work but on
    what it holds, and took most of the stop time of a long model's batch: pytest formats the whole traceback of the
    interrupt (parsing the source of every frame and printing the arrays they hold), of which it shows only the last
    line without ``--full-trace``, and the garbage collector walks every object the run made while the run ends. The
    traceback is cut to the frame that was interrupted (unless ``--full-trace``), and what exists is frozen out of the
    collector's reach (the process frees it as it exits)."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        gc.freeze()
        if not self.config.option.fulltrace and len(excinfo.traceback) > 1:
            excinfo.traceback = excinfo.traceback[-1:]


def pytest_ignore_collect(collection_path, config):
    """An extra case's test module is not collected when ``--model`` leaves it out (``--model widedeep``), nor the
    six models' modules when ``--model`` names extra cases only (``--model minilm``)."""
    if collection_path.parent != Path(__file__).parent or not collection_path.name.startswith("test_"):
        return None
    settings = run_settings(config)
    case = EXTRA_CASE_MODULES.get(collection_path.name)
    if case is not None:
        return True if case not in settings.cases else None
    if not settings.models:  # --onnx alone: the accuracy test of the graphs only
        return None if settings.onnx and collection_path.name == "test_accuracy.py" else True
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    return header_lines(run_settings(config), user_cases(config))
