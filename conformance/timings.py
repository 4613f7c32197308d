"""How long the run should take on this machine, said before the first test and as it goes.

Each test's wall time (its fixtures' start-up work included: building weights, FP32 references, calibration) is kept
after a run in ``<cache-dir>/timings/<hardware>-<profile>.json``, by test id. The next run on the machine sums the
times of the tests it selected for the first screen's estimate, and before each test says ``test k/N`` and the time
left: the earlier times of the tests still to run, scaled by how the tests run so far compare with their earlier
times (a machine busier than last time), and the mean for tests never timed here. The time from the last test's end
to the session's (the report written, its figures drawn) is kept beside them and counts in every estimate, so that
a short job's estimate is not only its tests'. The file is an estimate's input,
never a verdict's: read bounded, and left unused (and replaced at the end) when it is not a JSON object of test ids
and finite, non-negative seconds.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from boundedio import InputFileError, load_json
from conformance.fileio import write_text_atomic

TIMINGS_LIMIT = 8 * 1024 * 1024  # bytes: far more than the times of every test of the suite
MAX_ID = 2000  # characters of a test id
# The key of the time after the last test (the report's writing): no test id has this form
AFTER_TESTS = "<after the tests: the report>"


def duration(seconds: float) -> str:
    """``seconds`` as a person plans with them: 40 s, 12 min, 1.5 h."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def read_timings(path: Path) -> dict[str, float]:
    """The test times kept in ``path``; {} when there are none or they are not what this module writes."""
    if not path.is_file():
        return {}
    try:
        document = load_json(path, "the test times of earlier runs", TIMINGS_LIMIT)
    except (InputFileError, OSError):
        return {}
    if not isinstance(document, dict):
        return {}
    times = {}
    for key, value in document.items():
        if not (isinstance(key, str) and len(key) <= MAX_ID and isinstance(value, (int, float))
                and not isinstance(value, bool) and math.isfinite(value) and value >= 0):
            return {}
        times[key] = float(value)
    return times


class RunClock:
    """The plugin object that says the run's expected time (see the module docstring). ``say(line)`` writes a line
    on the terminal; ``path`` is the file of test times (None: nothing is kept, the estimate comes from the tests
    run so far)."""

    def __init__(self, say, path: Path | None, clock=time.monotonic):
        self.say, self.path, self.clock = say, path, clock
        self.earlier = read_timings(path) if path is not None else {}
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.measured: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.last_finish: float | None = None
        self.interrupted = False

    # -- the estimate ------------------------------------------------------------------------------------------------
    def left(self, remaining: list[str]) -> float | None:
        """Seconds the ``remaining`` tests, and the report after them, should take, or None when nothing is known
        yet."""
        known = [t for t in self.measured if t in self.earlier and self.earlier[t] > 0]
        scale = (sum(self.measured[t] for t in known) / sum(self.earlier[t] for t in known)) if known else 1.0
        times = [self.earlier[t] * scale for t in remaining if t in self.earlier]
        pool = [self.earlier[t] * scale for t in self.ids if t in self.earlier] or list(self.measured.values())
        if not pool:
            return None
        mean = sum(pool) / len(pool)
        return sum(times) + mean * (len(remaining) - len(times)) + self.earlier.get(AFTER_TESTS, 0.0) * scale

    # -- pytest hooks ------------------------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session) -> None:
        if session.config.option.collectonly:
            return
        self.ids = [item.nodeid for item in session.items]
        self.index = {node_id: k for k, node_id in enumerate(self.ids, 1)}
        if not self.ids:
            return
        timed = sum(1 for t in self.ids if t in self.earlier)
        count = f"{len(self.ids)} test{'s' if len(self.ids) != 1 else ''}"
        if timed == 0:
            self.say(f"{count}; none timed on this machine before: the time left is said as they run")
            return
        total = self.left(self.ids)
        basis = "an earlier run's times" if timed == len(self.ids) else \
            f"an earlier run's times of {timed} of them, the mean for the others"
        self.say(f"{count}; about {duration(total)} on this machine ({basis})")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self.started[nodeid] = self.clock()
        k = self.index.get(nodeid)
        if k is None:
            return
        left = self.left(self.ids[k - 1:])
        self.say(f"test {k}/{len(self.ids)}: {nodeid.split('::')[-1]}"
                 + (f", about {duration(left)} left" if left is not None else ""))

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        start = self.started.pop(nodeid, None)
        if start is not None:
            self.last_finish = self.clock()
            self.measured[nodeid] = self.last_finish - start

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = True

    @pytest.hookimpl(trylast=True)  # after the report's own hook has written it
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        """The times of the tests that ran are kept for the next run (those of an interrupted test are not: it did
        not finish), and the time since the last one (the report's writing) unless the run was interrupted."""
        if self.path is None or not self.measured:
            return
        kept = {**self.earlier, **{t: round(s, 3) for t, s in self.measured.items()}}
        if not self.interrupted and int(exitstatus) != int(pytest.ExitCode.INTERRUPTED):
            kept[AFTER_TESTS] = round(self.clock() - self.last_finish, 3)
        try:
            write_text_atomic(self.path, json.dumps(kept, sort_keys=True, indent=0) + "\n")
        except OSError:
            pass  # an estimate's input: a cache that cannot be written costs only the next run's estimate
