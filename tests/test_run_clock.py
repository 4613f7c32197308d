"""The run's clock: the first screen's estimate from an earlier run's test times, ``test k/N`` with the time left, the
times kept for the next run, and a file of times that is not what the clock writes left unused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from conformance.timings import AFTER_TESTS, RunClock, duration, read_timings

IDS = [f"conformance/test_accuracy.py::test_accuracy[m-{p}]" for p in ("fp16", "fp8", "fp8-weights")]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _session(ids):
    return SimpleNamespace(items=[SimpleNamespace(nodeid=i) for i in ids],
                           config=SimpleNamespace(option=SimpleNamespace(collectonly=False)))


def _run(clock: RunClock, now: Clock, seconds: dict[str, float]) -> None:
    """The tests of ``seconds`` run one after the other, each taking its seconds."""
    for node_id, taken in seconds.items():
        clock.pytest_runtest_logstart(node_id, None)
        now.now += taken
        clock.pytest_runtest_logfinish(node_id, None)


def test_a_first_run_says_it_has_no_times_then_the_time_left_from_the_tests_so_far(tmp_path):
    lines, now = [], Clock()
    path = tmp_path / "timings" / "ipu-smoke.json"
    clock = RunClock(lines.append, path, now)
    clock.pytest_collection_finish(_session(IDS))
    assert lines == ["3 tests; none timed on this machine before: the time left is said as they run"]
    _run(clock, now, {IDS[0]: 30.0, IDS[1]: 10.0})
    assert lines[1] == "test 1/3: test_accuracy[m-fp16]"  # nothing known yet
    assert lines[2] == "test 2/3: test_accuracy[m-fp8], about 60 s left"  # 2 tests left at 30 s each
    now.now += 4.0  # the report's writing
    clock.pytest_sessionfinish(None, 0)
    assert read_timings(path) == {IDS[0]: 30.0, IDS[1]: 10.0, AFTER_TESTS: 4.0}  # what ran; the third test did not


def test_the_next_run_estimates_the_whole_job_and_scales_to_how_this_run_goes(tmp_path):
    path = tmp_path / "ipu-smoke.json"
    path.write_text(json.dumps({IDS[0]: 60.0, IDS[1]: 30.0, IDS[2]: 30.0, "conformance/other": 5.0}))
    lines, now = [], Clock()
    clock = RunClock(lines.append, path, now)
    clock.pytest_collection_finish(_session(IDS))
    assert lines == ["3 tests; about 2 min on this machine (an earlier run's times)"]
    _run(clock, now, {IDS[0]: 120.0, IDS[1]: 60.0})  # this run goes at half the speed of the earlier one
    assert lines[1] == "test 1/3: test_accuracy[m-fp16], about 2 min left"
    assert lines[2] == "test 2/3: test_accuracy[m-fp8], about 2 min left"  # (30 + 30) s, twice as long
    clock.pytest_sessionfinish(None, 0)
    assert read_timings(path) == {IDS[0]: 120.0, IDS[1]: 60.0, IDS[2]: 30.0, "conformance/other": 5.0, AFTER_TESTS: 0.0}


def test_tests_never_timed_here_count_at_the_mean_of_those_that_were(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({IDS[0]: 40.0}))
    lines = []
    clock = RunClock(lines.append, path, Clock())
    clock.pytest_collection_finish(_session(IDS))
    assert lines == ["3 tests; about 2 min on this machine (an earlier run's times of 1 of them, the mean for the "
                     "others)"]


def test_the_reports_time_after_the_tests_counts_in_every_estimate(tmp_path):
    """A short job's time is mostly what follows its tests (the report, its figures): the last run's time after its
    tests is kept and counts, scaled as the tests are, in the first screen's estimate and the time left; an
    interrupted run keeps the times of its finished tests but not that of a report it did not finish."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({IDS[0]: 4.0, AFTER_TESTS: 30.0}))
    lines, now = [], Clock()
    clock = RunClock(lines.append, path, now)
    clock.pytest_collection_finish(_session(IDS[:1]))
    assert lines == ["1 test; about 34 s on this machine (an earlier run's times)"]
    _run(clock, now, {IDS[0]: 8.0})  # this run goes at half the speed
    assert lines[1] == "test 1/1: test_accuracy[m-fp16], about 34 s left"
    now.now += 50.0
    clock.pytest_sessionfinish(None, 0)
    assert read_timings(path) == {IDS[0]: 8.0, AFTER_TESTS: 50.0}
    again = RunClock(lines.append, path, now)
    again.pytest_collection_finish(_session(IDS[:2]))
    assert lines[-1] == "2 tests; about 66 s on this machine (an earlier run's times of 1 of them, the mean for the others)"
    _run(again, now, {IDS[0]: 8.0})
    again.pytest_keyboard_interrupt(None)
    now.now += 1.0
    again.pytest_sessionfinish(None, 2)
    assert read_timings(path) == {IDS[0]: 8.0, AFTER_TESTS: 50.0}  # the interrupted run's report time is not kept


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"a": -1}', '{"a": "ten"}', '{"a": true}', '{"a": 1e999}',
                                     '{"a": NaN}'])
def test_a_file_of_times_that_is_not_the_clocks_is_left_unused_and_replaced(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_text(content)
    assert read_timings(path) == {}
    lines, now = [], Clock()
    clock = RunClock(lines.append, path, now)
    clock.pytest_collection_finish(_session(IDS[:1]))
    assert "none timed" in lines[0]
    _run(clock, now, {IDS[0]: 2.0})
    clock.pytest_sessionfinish(None, 0)
    assert read_timings(path) == {IDS[0]: 2.0, AFTER_TESTS: 0.0}


def test_without_a_file_nothing_is_kept_and_collect_only_says_nothing(tmp_path):
    lines, now = [], Clock()
    clock = RunClock(lines.append, None, now)
    session = _session(IDS)
    session.config.option.collectonly = True
    clock.pytest_collection_finish(session)
    assert lines == []
    clock.pytest_sessionfinish(None, 0)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("seconds, shown", [(0.2, "1 s"), (40, "40 s"), (89, "89 s"), (600, "10 min"),
                                            (5400, "1.5 h")])
def test_durations_read_as_a_person_plans(seconds, shown):
    assert duration(seconds) == shown
