"""``ipu-conformance report compare`` and ``report validate`` on the fixed sample record."""

from __future__ import annotations

import copy
import json

import pytest

from conformance.cli import main as cli_main
from conformance.report import compare
from conformance.report import record as results_record
from tests.sample_results import sample_file, sample_results

OFFLINE = "performance/resnet50/fp8/Offline/samples_per_second"


@pytest.fixture
def sample() -> dict:
    return results_record.validate(sample_results())


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_same_run_has_no_change(sample, tmp_path, capsys):
    path = write(tmp_path, "a.json", sample)
    assert compare.changes(sample, sample) == []
    assert cli_main(["report", "compare", path, str(sample_file(tmp_path))]) == 0
    assert "No check changed." in capsys.readouterr().out


def test_injected_change_is_listed_with_delta_and_a_worse_verdict_fails(sample, tmp_path, capsys):
    new = copy.deepcopy(sample)
    offline = next(r for r in new["records"] if r["id"] == OFFLINE)
    offline.update(value=9000.0, passed=False)  # 11234.5 -> 9000 against >= 10830: PASS -> FAIL
    [change] = compare.changes(sample, new)
    assert change == {"id": OFFLINE, "old": "11234.5", "new": "9000", "delta": "-2234 (-19.89%)", "target": ">= 10830",
                      "old_verdict": "PASS", "new_verdict": "FAIL", "change": "WORSE"}
    old_path, new_path = write(tmp_path, "old.json", sample), write(tmp_path, "new.json", new)
    assert cli_main(["report", "compare", old_path, new_path]) == 1
    out = capsys.readouterr().out
    assert OFFLINE in out and "WORSE" in out and "1 check(s) changed (1 worse)" in out
    # the other way round it got better: not a failure
    assert cli_main(["report", "compare", new_path, old_path]) == 0
    assert "better" in capsys.readouterr().out
    for fmt, marker in (("md", "| Check"), ("html", '<tr class="worse">')):
        out_file = tmp_path / f"cmp.{fmt}"
        assert cli_main(["report", "compare", old_path, new_path, "--format", fmt, "--out", str(out_file)]) == 1
        assert marker in out_file.read_text() and OFFLINE in out_file.read_text()


def test_value_change_without_verdict_change_and_one_sided_records(sample):
    new = copy.deepcopy(sample)
    next(r for r in new["records"] if r["id"] == OFFLINE)["value"] = 11400.0
    removed = new["records"].pop(0)
    found = {c["id"]: c for c in compare.changes(sample, new)}
    assert found[OFFLINE]["change"] == "changed" and found[OFFLINE]["delta"] == "+165.5 (+1.47%)"
    assert found[removed["id"]]["change"] == "removed"
    assert not compare.worsened(sample, new)


def test_compare_refuses_bad_arguments(sample, tmp_path, capsys):
    path = write(tmp_path, "a.json", sample)
    assert cli_main(["report", "compare", path]) == 4
    assert "compare takes two results files" in capsys.readouterr().err
    assert cli_main(["report", "compare", path, path, "--format", "csv"]) == 4


def test_validate_exit_codes(sample, tmp_path, capsys):
    assert cli_main(["report", "validate", str(sample_file(tmp_path))]) == 0
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


F1_FP16 = "accuracy/bert-base/fp16/-/f1@0.99xfp32"


def passing(sample: dict) -> dict:
    """The sample run without its failed tests, their records and its regressions: a consistent PASS."""
    data = copy.deepcopy(sample)
    data["tests"] = [t for t in data["tests"] if t["outcome"] not in ("failed", "error")]
    kept = {t["id"] for t in data["tests"]}
    data["records"] = [r for r in data["records"] if r["test_id"] in kept]
    data["regressions"], data["settings"]["baseline"] = [], None
    data["verdict"], data["exit_status"] = "PASS", 0
    return data


def fewer_samples_run(sample: dict) -> tuple[dict, dict]:
    """A failed run on 1024 samples and a passing one on 256, where a gate that the larger run established passes on
    its point estimate only: what a smaller sample count does to a 95% interval."""
    old = copy.deepcopy(sample)
    old["settings"]["samples"] = {"*": 1024}
    new = passing(sample)
    new["settings"]["samples"] = {"*": 256}
    record = next(r for r in new["records"] if r["id"] == F1_FP16)
    record.update(value=0.9991, established=False)
    record["details"].update(ci95=[0.9873, 1.0], ratio_ci95=[0.9873, 1.0])
    return old, new


def test_fail_to_pass_with_fewer_samples_is_better_and_the_samples_are_named(sample, tmp_path, capsys):
    old, new = fewer_samples_run(sample)
    found = {c["id"]: c for c in compare.changes(old, new)}
    assert (found[F1_FP16]["old_verdict"], found[F1_FP16]["new_verdict"]) == ("PASS", "PASS*")
    assert found[F1_FP16]["change"] == "settings"  # not worse: the interval widened with fewer samples
    assert compare.run_change(old, new) == "better" and not compare.worsened(old, new)
    assert all(c["change"] != "WORSE" for c in found.values())
    assert [d.describe() for d in compare.differences(old, new) if d.setting == "samples"] == [
        f"samples of {model} 1024 -> 256" for model in new["settings"]["models"]]
    old_path, new_path = write(tmp_path, "old.json", old), write(tmp_path, "new.json", new)
    assert cli_main(["report", "compare", old_path, new_path]) == 0
    out = capsys.readouterr().out
    assert "differ in settings that change the figures: samples of bert-base 1024 -> 256" in out
    assert "run verdict FAIL -> PASS: better" in out and "comparison: not worse" in out
    # to a file: the warning still reaches the log
    assert cli_main(["report", "compare", old_path, new_path, "--out", str(tmp_path / "c.md"), "--format", "md"]) == 0
    assert "samples of bert-base 1024 -> 256" in capsys.readouterr().err
    # the other way round the run got worse, whatever the settings
    assert cli_main(["report", "compare", new_path, old_path]) == 1
    assert "run verdict PASS -> FAIL: worse" in capsys.readouterr().out


def test_pass_to_pass_star_with_the_same_settings_is_worse(sample):
    old, new = fewer_samples_run(sample)
    new["settings"]["samples"] = old["settings"]["samples"]
    [change] = [c for c in compare.changes(old, new) if c["id"] == F1_FP16]
    assert change["change"] == "WORSE" and compare.worsened(old, new)


def test_a_gate_that_fails_is_worse_even_when_the_settings_differ(sample):
    old, new = fewer_samples_run(sample)
    old, new = passing(old), copy.deepcopy(old)  # PASS on 1024 samples, then FAIL on 1024 ...
    new["settings"]["samples"] = {"*": 256}  # ... on 256
    found = {c["id"]: c for c in compare.changes(old, new)}
    snr = "accuracy/conformer/fp8/-/snr_db"
    assert found[snr]["change"] == "added"
    latency = "performance/resnet50/fp8/SingleStream/p90_latency_ms"
    assert found[latency]["change"] == "added"
    old_latency = copy.deepcopy(next(r for r in new["records"] if r["id"] == latency))
    old_latency.update(value=1.4, passed=True, outcome="passed")
    old["records"].append(old_latency)
    assert {c["id"]: c for c in compare.changes(old, new)}[latency]["change"] == "WORSE"


@pytest.mark.parametrize("key, old_value, new_value, named", [
    ("checkpoints", {}, {"resnet50": "ckpt/resnet50"}, "checkpoint of resnet50 default -> ckpt/resnet50"),
    ("datasets", {}, {"resnet50": "data/imagenet"}, "data set of resnet50 default -> data/imagenet"),
    ("device", "c600", "m2000", "device c600 -> m2000"),
    ("profile", "smoke", "default", "profile smoke -> default"),
])
def test_each_setting_that_changes_the_figures_is_named(sample, key, old_value, new_value, named):
    old, new = copy.deepcopy(sample), copy.deepcopy(sample)
    old["settings"][key], new["settings"][key] = old_value, new_value
    next(r for r in new["records"] if r["id"] == OFFLINE)["value"] = 5200.0
    [warning] = compare.warnings_of(old, new)
    assert named in warning
    [change] = compare.changes(old, new)
    assert change["change"] == "settings"


def test_a_setting_of_another_model_leaves_a_change_as_it_is(sample):
    old, new = copy.deepcopy(sample), copy.deepcopy(sample)
    old["settings"]["checkpoints"], new["settings"]["checkpoints"] = {}, {"bert-base": "ckpt/bert"}
    next(r for r in new["records"] if r["id"] == OFFLINE)["value"] = 5200.0  # resnet50: its settings are the same
    [change] = compare.changes(old, new)
    assert change["change"] == "changed"


def test_other_precisions_are_a_note_not_a_settings_change(sample):
    old, new = copy.deepcopy(sample), copy.deepcopy(sample)
    old["settings"]["precisions"], new["settings"]["precisions"] = ["fp8", "fp16"], ["fp8"]
    [note] = compare.warnings_of(old, new)
    assert note.startswith("note: the runs chose different checks: precisions fp8,fp16 -> fp8")
    assert compare.changes(old, new) == []


def outside_the_suite(data: dict) -> dict:
    """``data`` as the run of tests other than the suite's own (a plugin's): records the target tables do not judge."""
    data = copy.deepcopy(data)
    for item in data["tests"]:
        item["id"] = item["id"].replace("conformance/", "plugin/")
    for item in data["records"] + data["regressions"]:
        item["test_id"] = item["test_id"].replace("conformance/", "plugin/")
    return data


def test_runs_of_two_hardware_targets_are_not_compared(sample, tmp_path, capsys):
    # outside the suite's tests, so that the cpu file is not refused first for gates no cpu table has
    ipu = outside_the_suite(sample)
    other = copy.deepcopy(ipu)
    other["settings"]["hardware"] = other["hardware"]["name"] = "cpu"
    assert cli_main(["report", "compare", write(tmp_path, "a.json", ipu), write(tmp_path, "b.json", other)]) == 4
    assert "different hardware ('ipu' and 'cpu')" in capsys.readouterr().err
