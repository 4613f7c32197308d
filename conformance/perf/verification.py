"""What MLCommons' compliance verification scripts say about a pair of runs, as they state their rules (mlcommons/inference
``compliance/TEST01/verify_accuracy.py``, ``compliance/TEST01/verify_performance.py``,
``compliance/TEST04/verify_performance.py``). Each function returns the script's verdict line: ``"TEST PASS"`` or
``"TEST FAIL..."`` with the script's reason.

The suite's audits gate on these verdicts and add stricter checks of their own (every byte of a sampled response, not
only its first; a missing sample is a failure): :mod:`conformance.perf.test01`, :mod:`conformance.perf.test04`.
A run that is INVALID only because a short profile made it too short is what :func:`invalid_by_design` tells apart:
the scripts fail it, and the suite reports the audit as not established rather than passed or failed.
"""

from __future__ import annotations

from typing import Sequence

from conformance.perf.harness import STREAM_SCENARIOS, ScenarioResult

TEST_PASS = "TEST PASS"
# The result field each scenario's score is read from (TEST01's verify_performance.py reads the detail log).
RESULT_FIELD = {
    "Offline": "result_samples_per_second",
    "SingleStream": "early_stopping_latency_ss",
    "MultiStream": "early_stopping_latency_ms",
    "Server": "result_completed_samples_per_sec",
}


def verify_accuracy(performance: Sequence, accuracy: Sequence) -> str:
    """TEST01's accuracy verdict in the script's default mode (``--dtype byte``): each performance-mode entry whose
    ``qsl_idx`` has an accuracy-mode entry must agree with it in its first byte (or both be empty); at least one must
    have a counterpart. As the script does, each performance entry then stands in for its ``qsl_idx`` when a later
    entry of the same sample is compared."""
    known: dict[int, bytes] = {}
    for entry in accuracy:
        known.setdefault(entry.qsl_idx, entry.data)
    matched = mismatched = 0
    for entry in performance:
        if entry.qsl_idx in known:
            matched += 1
            theirs, ours = known[entry.qsl_idx], entry.data
            if not theirs or not ours:
                mismatched += len(theirs) != len(ours)
            elif theirs[:1] != ours[:1]:
                mismatched += 1
        known[entry.qsl_idx] = entry.data
    return TEST_PASS if mismatched == 0 and matched > 0 else "TEST FAIL"


def result_score(result: ScenarioResult) -> float | None:
    """The scenario's result field as LoadGen logged it (samples/s, or an early-stopping latency estimate in ns)."""
    value = result.details.get(RESULT_FIELD[result.scenario])
    return None if value is None else float(value)


def test01_performance(reference: ScenarioResult, test: ScenarioResult, tolerance_for) -> str:
    """TEST01's performance verdict: both runs VALID, the same scenario, and the test run's score within the
    tolerance of the reference run's (``tolerance_for(scenario, reference_score)``)."""
    if not (reference.valid and test.valid):
        return "TEST FAIL: Invalid results"
    if reference.scenario != test.scenario:
        return "TEST FAIL: Test and reference scenarios do not match!"
    ref, score = result_score(reference), result_score(test)
    if ref is None or score is None:
        return "TEST FAIL: Invalid results"
    tolerance = tolerance_for(reference.scenario, ref)
    return TEST_PASS if ref * (1 - tolerance) <= score <= ref * (1 + tolerance) else "TEST FAIL: Test score invalid"


def test04_score(result: ScenarioResult) -> float:
    """TEST04's score from a run's summary: samples/s, or 1e9 / the early-stopping latency estimate (ns); 0 when the
    summary has none (the script's starting value)."""
    value = result_score(result)
    if value is None:
        return 0.0
    return 1e9 / value if result.scenario in STREAM_SCENARIOS and value else value


def test04_performance(reference: ScenarioResult, test: ScenarioResult, limit_for) -> str:
    """TEST04's verdict: the reference run VALID, the test run VALID, and the test score below ``limit`` x the
    reference score (``limit_for(scenario, reference_score)``: 1.10, or 1.20 for short latencies)."""
    if not reference.valid:
        return "TEST FAIL: Reference results are invalid"
    if not test.valid:
        return "TEST FAIL: Test results are invalid"
    if reference.scenario != test.scenario:
        return "Test and reference scenarios do not match!"
    ref, score = test04_score(reference), test04_score(test)
    return TEST_PASS if score < ref * limit_for(reference.scenario, ref) else "TEST FAIL"


def invalid_by_design(*runs: ScenarioResult) -> bool:
    """Whether the INVALID runs among ``runs`` are INVALID only because they are shorter than MLPerf's (a short
    profile's run length or query count), not for a missed constraint or an error; False when none is INVALID."""
    invalid = [r for r in runs if not r.valid]
    return bool(invalid) and all(r.length_only_invalid and not r.compliant_length and not r.sut_errors
                                 for r in invalid)
