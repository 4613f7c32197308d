"""``ipu-conformance report compare`` and ``report validate`` on the fixed sample record."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.report import compare
from conformance.report import record as results_record

SAMPLE = Path(__file__).parent / "snapshots" / "report_sample_results.json"
OFFLINE = "performance/resnet50/fp8/Offline/samples_per_s"


@pytest.fixture
def sample() -> dict:
    return results_record.load(SAMPLE)


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_same_run_has_no_change(sample, tmp_path, capsys):
    path = write(tmp_path, "a.json", sample)
    assert compare.changes(sample, sample) == []
    assert cli_main(["report", "compare", path, str(SAMPLE)]) == 0
    assert "No check changed." in capsys.readouterr().out


def test_injected_change_is_listed_with_delta_and_a_worse_verdict_fails(sample, tmp_path, capsys):
    new = copy.deepcopy(sample)
    offline = next(r for r in new["records"] if r["id"] == OFFLINE)
    offline.update(value=4000.0, passed=False)  # 5123.4 -> 4000 against >= 4800: PASS -> FAIL
    [change] = compare.changes(sample, new)
    assert change == {"id": OFFLINE, "old": "5123.4", "new": "4000", "delta": "-1123 (-21.93%)", "target": ">= 4800",
                      "old_verdict": "PASS", "new_verdict": "FAIL", "change": "WORSE"}
    old_path, new_path = write(tmp_path, "old.json", sample), write(tmp_path, "new.json", new)
    assert cli_main(["report", "compare", old_path, new_path]) == 1
    out = capsys.readouterr().out
    assert OFFLINE in out and "WORSE" in out and "1 verdict(s) worse" in out
    # the other way round it got better: not a failure
    assert cli_main(["report", "compare", new_path, old_path]) == 0
    assert "better" in capsys.readouterr().out
    for fmt, marker in (("md", "| Check"), ("html", '<tr class="worse">')):
        out_file = tmp_path / f"cmp.{fmt}"
        assert cli_main(["report", "compare", old_path, new_path, "--format", fmt, "--out", str(out_file)]) == 1
        assert marker in out_file.read_text() and OFFLINE in out_file.read_text()


def test_value_change_without_verdict_change_and_one_sided_records(sample):
    new = copy.deepcopy(sample)
    next(r for r in new["records"] if r["id"] == OFFLINE)["value"] = 5200.0
    removed = new["records"].pop(0)
    found = {c["id"]: c for c in compare.changes(sample, new)}
    assert found[OFFLINE]["change"] == "changed" and found[OFFLINE]["delta"] == "+76.6 (+1.50%)"
    assert found[removed["id"]]["change"] == "removed"
    assert not compare.worsened(sample, new)


def test_compare_refuses_bad_arguments(sample, tmp_path, capsys):
    path = write(tmp_path, "a.json", sample)
    assert cli_main(["report", "compare", path]) == 2
    assert "compare takes two results files" in capsys.readouterr().err
    assert cli_main(["report", "compare", path, path, "--format", "csv"]) == 2


def test_validate_exit_codes(sample, tmp_path, capsys):
    assert cli_main(["report", "validate", str(SAMPLE)]) == 0
    assert "valid ipu-conformance/results/1" in capsys.readouterr().out
    bad = copy.deepcopy(sample)
    bad["records"][3]["value"] = "fast"
    assert cli_main(["report", "validate", write(tmp_path, "bad.json", bad)]) == 1
    assert "records[3].value" in capsys.readouterr().out
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert cli_main(["report", "validate", str(broken)]) == 1
    assert cli_main(["report", "validate", str(tmp_path / "missing.json")]) == 4
    assert "missing.json: cannot read it" in capsys.readouterr().err
    assert cli_main(["report", "validate", str(tmp_path)]) == 4  # a directory
