"""Records travel on the reports with the details their test's records share written once, and come back whole;
--junitxml shows each record as one line."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conformance.report.checks import RECORD_KEY
from conformance.report.collect import SHARED_DETAILS_KEY, encode_properties, junit_properties, properties


def record(check, value, **details):
    return {"kind": "accuracy", "model": "resnet50", "precision": "fp8", "scenario": None, "check": check,
            "value": value, "op": ">=", "target": 0.5, "units": "", "passed": value >= 0.5, "gating": True,
            "established": None, "details": {"samples": 4, "fp8_scales": {"conv1": 8.0}, **details}}


def test_shared_details_are_written_once_and_read_back_whole():
    records = [record("top1", 0.9, own=1), record("top5", 0.3, own=2)]
    encoded = encode_properties([(RECORD_KEY, r) for r in records] + [("other", "x")])
    assert encoded[0][0] == SHARED_DETAILS_KEY
    assert json.loads(encoded[0][1]) == {"samples": 4, "fp8_scales": {"conv1": 8.0}}
    assert all("samples" not in json.loads(v)["details"] for k, v in encoded if k == RECORD_KEY)
    decoded = properties(SimpleNamespace(user_properties=encoded))
    assert [v for k, v in decoded if k == RECORD_KEY] == records and ("other", "x") in decoded


def test_junit_shows_one_line_per_record_and_the_scalar_shared_details():
    encoded = encode_properties([(RECORD_KEY, record("top1", 0.9)), (RECORD_KEY, record("top5", 0.3))])
    shown = dict(junit_properties(encoded)[:1])
    assert json.loads(shown[SHARED_DETAILS_KEY]) == {"samples": 4}
    lines = [v for k, v in junit_properties(encoded) if k == RECORD_KEY]
    assert lines == ["resnet50 fp8 top1: 0.9 >= 0.5, PASS", "resnet50 fp8 top5: 0.3 >= 0.5, FAIL"]
