"""The settings of a pytest run as the hooks and the suites read them: kept in ``config.stash`` by the plugin when
the options are checked; the suites read them here (``pytest_generate_tests``) or through the fixtures of
``conformance/conftest.py``, never from the plugin."""

from __future__ import annotations

import contextlib
import platform
import sys

import numpy
import pytest

from conformance.datasets.user import UserCase
from conformance.settings.run import RunSettings

SETTINGS_KEY = pytest.StashKey[RunSettings]()
USER_CASES_KEY = pytest.StashKey[dict[str, UserCase]]()


def run_settings(config: pytest.Config) -> RunSettings:
    """The settings the tests see (their ``report_dir`` is the run's staging directory)."""
    return config.stash[SETTINGS_KEY]


def user_cases(config: pytest.Config) -> dict[str, UserCase]:
    """The models the user gave a checkpoint, data set or calibration data for, loaded and checked."""
    return config.stash[USER_CASES_KEY]


def progress_line(config: pytest.Config, message: str) -> None:
    """One line of progress on the terminal (a long accuracy run says which model it is on), shown at once also
    while a test runs with its output captured (pytest's capture is suspended for the line, as for ``-s``)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        if reporter is None:  # while the options are checked, before pytest's terminal is set up
            if config.getoption("verbose", 0) >= 0:
                print(f"[conformance] {message}", file=sys.stderr, flush=True)
            return
        reporter.ensure_newline()
        if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):  # after another line under the dots
            reporter.write("\n")
        reporter.write_line(f"[conformance] {message}")


def header_lines(settings: RunSettings, cases: dict[str, UserCase]) -> list[str]:
    """The run's settings, versions and judged cases, for the head of pytest's output."""
    backend = settings.backend
    versions = {"python": platform.python_version(), "numpy": numpy.__version__, **backend.versions()}
    return [
        f"conformance: hardware={settings.hardware} ({backend.description}), precisions={','.join(backend.precisions)}",
        f"conformance: profile={settings.profile}, models={','.join(settings.models)}",
        "conformance: versions " + ", ".join(f"{k}={v}" for k, v in versions.items()),
        *(f"conformance: {name} judged: {describe_case(case)}" for name, case in cases.items()),
    ]


def describe_case(case: UserCase) -> str:
    """One line: the checkpoint and data set of a user's case."""
    parts = [f"checkpoint {case.checkpoint['path']} (sha256 {case.checkpoint['sha256'][:12]})" if case.checkpoint
             else "seeded weights"]
    if case.evaluation is not None:
        data = case.evaluation.provenance
        parts.append(f"{data['format']} {data['path']} ({case.evaluation.units} units, labels: {data['labels']})")
    else:
        parts.append("synthetic samples")
    return ", ".join(parts)
