"""The compliance column says what MLCommons' verification scripts say; a Server row's result is completed samples/s."""

from __future__ import annotations

import pytest

from conformance.report.render import _server_figures, compliance_text


def audit(passed=True, established=True, **official):
    return {"check": "TEST01", "passed": passed, "established": established, "gating": True,
            "details": {"official": official}}


@pytest.mark.parametrize("record, text", [
    (audit(verify_accuracy="TEST PASS", verify_performance="TEST PASS"), "TEST01 PASS"),
    (audit(False, True, verify_accuracy="TEST FAIL", verify_performance="TEST PASS"),
     "TEST01 FAIL (verify_accuracy.py: TEST FAIL; verify_performance.py: TEST PASS)"),
    (audit(False, True, verify_accuracy="TEST PASS", verify_performance="TEST FAIL: Invalid results"),
     "TEST01 FAIL (verify_accuracy.py: TEST PASS; verify_performance.py: TEST FAIL: Invalid results)"),
    (audit(True, False, verify_accuracy="TEST PASS", verify_performance="TEST FAIL: Invalid results"),
     "TEST01 not established (verify_accuracy.py: TEST PASS; verify_performance.py: TEST FAIL: Invalid results; "
     "runs shorter than MLPerf's)"),
    (audit(False, True, verify_accuracy="TEST PASS", verify_performance="TEST PASS"),
     "TEST01 FAIL (the scripts: TEST PASS; the suite's byte check: FAIL)"),
])
def test_compliance_column_names_each_scripts_verdict(record, text):
    assert compliance_text(record) == text
    assert "PASS" != compliance_text(record).split()[-1] or record["passed"] and record["established"]


def test_server_result_is_completed_samples_per_second_beside_target_and_highest_valid_qps():
    records = [{"check": "p99_latency_ms", "value": 9.0, "details": {"target_qps": 7580.0,
                                                                   "completed_samples_per_second": 7467.6}},
               {"check": "max_valid_server_qps", "value": 12116.0, "details": {"target_qps": 7580.0}}]
    assert _server_figures(records) == {"target": 7580.0, "completed": 7467.6, "max_valid": 12116.0}
