"""Known-failure files (format, matching, staleness) and the report's pictures."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from conformance.report import plots, xfails
from conformance.report.xfails import XFAILS_DIR
from conformance.targets.profiles import load_profiles

REPO = Path(__file__).resolve().parents[1]
MODELS = ("albert", "bert-base", "resnet50")
GOOD = """\
# comment
[temporarily-failing]
test_accuracy[bert-base-fp8]  snr_db,f1@0.99xfp32  SNR short of target   # trailing text is part of the reason
[permanent]
conformance/test_performance.py::test_performance[resnet50-fp8-*]  p99_latency_ms  host link too slow
[unsupported]
test_accuracy[albert-fp16]  no FP16 embedding gather
"""


def test_parse_buckets_and_reasons():
    entries = xfails.parse(GOOD, "x.txt")
    assert [(e.test_id, e.bucket) for e in entries] == [
        ("test_accuracy[bert-base-fp8]", "temporarily-failing"),
        ("conformance/test_performance.py::test_performance[resnet50-fp8-*]", "permanent"),
        ("test_accuracy[albert-fp16]", "unsupported"),
    ]
    assert entries[0].reason.startswith("SNR short of target") and entries[0].source == "x.txt:3"
    assert entries[0].checks == ("snr_db", "f1@0.99xfp32") and entries[2].checks == ()
    assert entries[0].names_check("snr_db") and entries[0].names_check("f1@0.99xfp32")
    assert not entries[0].names_check("f1@0.999xfp32") and not entries[0].names_check("cosine")


def test_known_failure_is_explained_only_by_its_named_checks():
    entry = xfails.parse("[permanent]\ntest_a[x]  top1_agreement  why\n", "x.txt")[0]
    failing = {"check": "top1_agreement@0.99xfp32", "gating": True, "passed": False, "details": {}}
    informational = {"check": "top1_agreement@0.999xfp32", "gating": False, "passed": False, "details": {}}
    assert entry.unexplained([failing, informational]) == []
    other = {"check": "snr_db", "gating": True, "passed": False, "details": {}}
    assert entry.unexplained([failing, other]) == ["snr_db failed, which the entry does not name"]
    nan = {**failing, "details": {"reason": "hardware output has non-finite values (NaN/Inf): 3 in output 'logits'"}}
    assert "non-finite" in entry.unexplained([nan])[0]
    assert entry.unexplained([{**failing, "passed": True}]) == ["no gated check failed (the test failed in another way)"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("test_a[x]  why\n", "x.txt:1: entry 'test_a[x]' before any bucket header"),
        ("[flaky]\n", "x.txt:1: unknown bucket '[flaky]'"),
        ("[permanent]\ntest_a[x]\n", "x.txt:2: entry 'test_a[x]' needs the checks expected to fail and a reason"),
        ("[permanent]\ntest_a[x] snr_db\n", "x.txt:2: entry 'test_a[x]' needs the checks expected to fail"),
        ("[permanent]\ntest_a[x] snr_db;f1 why\n", "x.txt:2: entry 'test_a[x]': 'snr_db;f1' is not a check name"),
        ("[unsupported]\ntest_a[x]\n", "x.txt:2: entry 'test_a[x]' has no reason"),
        ("[permanent]\ntest_a[x] c a\n[unsupported]\ntest_a[x] b\n", "x.txt:4: 'test_a[x]' is already listed at x.txt:2"),
    ],
)
def test_malformed_files_are_named(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        xfails.parse(text, "x.txt")


def test_matching_brackets_literal_star_wildcard():
    entries = xfails.parse(GOOD, "x.txt")
    ids = ["conformance/test_accuracy.py::test_accuracy[bert-base-fp8]",
           "conformance/test_accuracy.py::test_accuracy[bert-base-fp16]",
           "conformance/test_performance.py::test_performance[resnet50-fp8-Server]",
           "conformance/test_performance.py::test_performance[resnet50-fp16-Server]",
           "other/test_performance.py::test_performance[resnet50-fp8-Server]"]
    found = xfails.match(ids, entries)
    assert {k: v.bucket for k, v in found.items()} == {ids[0]: "temporarily-failing", ids[2]: "permanent"}


def test_runs_of_stars_match_in_linear_time():
    """A pattern of 10,000 stars (and a run of stars before a letter, which a backtracking regex takes exponential
    time for) is matched against 1,000 test ids at once."""
    ids = [f"conformance/test_accuracy.py::test_accuracy[model{i:04d}-fp8]" for i in range(1000)]
    stars = "*" * 10_000
    entries = xfails.parse(f"[unsupported]\n{stars}Q  x\n[permanent]\n{stars}8]{stars}  c  y\n", "x.txt")
    start = time.perf_counter()
    found = xfails.match(ids, entries)
    many = xfails.parse("[unsupported]\n" + "*a" * 5_000 + "*Q  x\n", "x.txt")
    assert xfails.match(ids, many) == {}
    assert time.perf_counter() - start < 1.0
    assert found == {i: entries[1] for i in ids if i.endswith("8]")}


@pytest.mark.parametrize("pattern, name", [
    ("a*b*c", "abc"), ("a*b*c", "aXbYc"), ("a*b*c", "acb"), ("*", ""), ("a*", "a"), ("*a", "ba"), ("a*a", "a"),
    ("a*a", "aa"), ("**a**", "xax"), ("ab*ba", "aba"), ("ab*ba", "abba"), ("*ab*ab*", "abab"), ("*ab*ab*", "aab"),
    ("x", "x"), ("x", "xy"), ("[a]*", "[a]b"), ("a.c", "abc"), ("*aab", "aaab"), ("a*b*b", "abbb"), ("a*b*b", "ab"),
])
def test_wildcard_agrees_with_a_regex(pattern, name):
    oracle = re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), name) is not None
    assert xfails.Wildcard(pattern).fullmatch(name) is oracle


def test_stale_entries_only_within_the_runs_scope():
    entries = xfails.parse(GOOD + "[permanent]\ntest_accuracy[resnet50-fp8]  c  gone\ntest_renamed[x]  c  old name\n",
                           "x.txt")
    items = [("conformance/test_accuracy.py::test_accuracy[bert-base-fp8]", "test_accuracy")]
    matched = xfails.match([i for i, _ in items], entries)
    stale = xfails.stale(entries, items, matched, models=MODELS, all_models=MODELS)
    # albert-fp16 and resnet50-fp8 name collected functions and selected models but match nothing; test_performance
    # and test_renamed were not collected in this partial run
    assert [e.test_id for e in stale] == ["test_accuracy[albert-fp16]", "test_accuracy[resnet50-fp8]"]
    only_bert = xfails.stale(entries, items, matched, models=("bert-base",), all_models=MODELS)
    assert only_bert == [], "entries of models the run did not select are not stale"
    whole = xfails.stale(entries, items, matched, models=MODELS, all_models=MODELS, whole_suite=True)
    assert "test_renamed[x]" in [e.test_id for e in whole], "in a whole-suite run a renamed test is stale"
    precisions = ("fp16", "fp16-half-partials", "fp8")
    only_fp8 = xfails.stale(entries, items, matched, models=MODELS, all_models=MODELS, precisions=("fp8",),
                            all_precisions=precisions)
    assert [e.test_id for e in only_fp8] == ["test_accuracy[resnet50-fp8]"], \
        "entries of precisions the run did not select (--precision) are not stale"
    half_only = xfails.stale(entries, items, matched, models=MODELS, all_models=MODELS,
                             precisions=("fp16-half-partials",), all_precisions=precisions)
    assert half_only == [], "fp16 is not fp16-half-partials"


def test_shipped_xfail_files_parse():
    for path in sorted(XFAILS_DIR.glob("*.txt")):
        xfails.load(path)
    assert (XFAILS_DIR / "cpu.txt").exists() and (XFAILS_DIR / "ipu.txt").exists()


def test_strict_in_release_profiles_only():
    profiles = load_profiles()
    assert profiles["full"].strict_xfails and profiles["default"].strict_xfails and not profiles["smoke"].strict_xfails


def write_artifact(report_dir):
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(8, 10)).astype(np.float32)
    hardware = (reference + rng.normal(scale=1e-2, size=reference.shape)).astype(np.float32)
    hardware[0, 0] = np.nan  # counted as 0, as the seed benchmark does
    (report_dir / "artifacts").mkdir(parents=True)
    np.savez(report_dir / "artifacts" / "bert-base-fp8.npz", reference__logits=reference, hardware__logits=hardware)


def test_plots_are_pngs_next_to_the_report(tmp_path):
    pytest.importorskip("matplotlib")
    write_artifact(tmp_path)
    records = [{"model": "bert-base", "precision": "fp8", "details": {"layer_snr_db": [["embed", 40.0], ["head", None]]}}]
    said: list[str] = []
    info = plots.write_plots(tmp_path, records, say=said.append)
    assert said == ["the report: drawing up to 2 figures"]  # announced before the drawing starts
    assert info["status"] == "written"
    assert info["files"] == {"bert-base-fp8": ["plots/bert-base-fp8-histograms.png", "plots/bert-base-fp8-layer-snr.png"]}
    for rel in info["files"]["bert-base-fp8"]:
        assert (tmp_path / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_skipped_without_matplotlib(tmp_path, monkeypatch):
    write_artifact(tmp_path)
    monkeypatch.setattr(plots, "_matplotlib", lambda: None)
    info = plots.write_plots(tmp_path, [])
    assert info["status"] == "skipped" and "matplotlib is not installed" in info["reason"]
    assert not (tmp_path / "plots").exists()


def test_malformed_artifact_is_reported_not_fatal(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "artifacts").mkdir()
    np.savez(tmp_path / "artifacts" / "resnet50-fp8.npz", reference__logits=np.zeros(3))
    info = plots.write_plots(tmp_path, [])
    assert info["files"] == {} and "expected reference__<output> and hardware__<output>" in info["reason"]


def _suite_run(pytester, tmp_path, *options: str) -> tuple[dict, str]:
    """widedeep's fp16 accuracy test (ipu smoke) with a report: its results.json's plots section, and its output."""
    report = tmp_path / "report"
    result = pytester.runpytest(str(REPO / "conformance"), "--hardware", "ipu", "--profile", "smoke", "--model",
                                "widedeep", "--precision", "fp16", "-k", "test_accuracy", "--report-dir", str(report),
                                *options)
    assert result.ret == 0, result.stdout.str()[-2000:]
    return json.loads((report / "results.json").read_text())["plots"], (report / "compliance.md").read_text()


def test_a_run_of_the_suite_draws_its_figures(pytester, plots_drawn, tmp_path):
    pytest.importorskip("matplotlib")
    info, compliance = _suite_run(pytester, tmp_path)
    assert info["status"] == "written" and info["files"] == {"widedeep-fp16": ["plots/widedeep-fp16-histograms.png"]}
    assert (tmp_path / "report" / "plots" / "widedeep-fp16-histograms.png").read_bytes()[:4] == b"\x89PNG"
    assert "plots/widedeep-fp16-histograms.png" in compliance


def test_no_plots_writes_the_report_without_its_figures_and_says_so(pytester, tmp_path):
    info, compliance = _suite_run(pytester, tmp_path, "--no-plots")
    assert info == {"status": "skipped", "reason": plots.NOT_ASKED, "files": {}}
    assert not (tmp_path / "report" / "plots").exists()
    assert plots.NOT_ASKED in compliance
