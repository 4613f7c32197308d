"""Output read in a CI log: tables that fit COLUMNS without cutting a word, compliance.md of sane width, the skipped tests
with their reasons, a progress line with the whole reason and the report's verdict, one self-contained results.html,
and each report subcommand's own help."""

from __future__ import annotations

import base64
import copy
import json
from types import SimpleNamespace

import pytest

from conformance.cli import main as cli_main
from conformance.report import render
from conformance.report import record as results_record
from conformance.report.checks import RECORD_KEY
from conformance.report.collect import Collector, encode_properties
from tests.sample_results import sample_results

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


@pytest.fixture
def sample() -> dict:
    return results_record.validate(sample_results())


def words(text: str) -> list[str]:
    return text.split()


def narrowest_checks_table(sample: dict) -> int:
    """The least width of the checks table with every word whole and its detail columns left out: a check name is one
    word (``p99_latency_ms_at_target_qps``), so that table may be wider than a narrow terminal, as narrow as its
    words allow."""
    headers = render.check_headers(sample)
    columns = [[headers[i], *(str(row[i]) for row in render.check_rows(sample))]
               for i, header in enumerate(headers) if header not in render.CHECKS_DETAIL_COLUMNS]
    widest = [max(len(word) for cell in column for word in cell.split()) for column in columns]
    return sum(widest) + 2 * (len(widest) - 1)


def too_wide(text: str, width: int, sample: dict) -> list[str]:
    """The lines of ``text`` (the terminal report) wider than ``width``, the checks table's wider than its words need,
    a failure's own message and a failed test's title left aside."""
    failures = {"  " + line for test in render.failed_tests(sample) for line in test["message"].splitlines()}
    checks_width, in_checks, found = max(width, narrowest_checks_table(sample)), False, []
    for line in text.rstrip("\n").split("\n"):
        in_checks = (in_checks or line.split()[:4] == ["Model", "Precision", "Scenario", "Check"]) and bool(line)
        limit = checks_width if in_checks else width
        if len(line) > limit and line not in failures and not any(line.endswith(test["id"] + ":")
                                                                  for test in sample["tests"]):
            found.append(line)
    return found


@pytest.mark.parametrize("width", [80, 100, 140])
def test_terminal_tables_fit_the_width_and_keep_every_word(sample, width):
    text = render.terminal(sample, detailed=True, width=width)
    *body, verdict = text.rstrip("\n").split("\n")
    assert too_wide("\n".join(body), width, sample) == []
    assert verdict == render.verdict_line(sample)  # one line to search for, whatever the width
    # every word of the matrix and of the reasons is there whole (wrapping moves words, never cuts them)
    headers, rows = render.matrix(sample)
    flat = words(text)
    for cell in (c for row in rows for c in row):
        assert all(word in flat for word in words(cell)), cell
    for reg in sample["regressions"]:
        assert " ".join(words(reg["message"])) in " ".join(flat)


def test_detail_columns_go_before_cells_are_wrapped_and_are_named(sample):
    wide = render.terminal(sample, width=400)
    assert "Timing" in wide and "Units" in wide and "left out" not in wide
    narrow = render.terminal(sample, width=100)
    assert "(left out to fit 100 columns: Timing, Units; a wider COLUMNS shows them)" in narrow


def test_columns_sets_the_width(sample, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert render.terminal_width() == 90
    assert too_wide("\n".join(render.terminal(sample).splitlines()[:-1]), 90, sample) == []
    monkeypatch.delenv("COLUMNS")
    assert render.terminal_width(SimpleNamespace(isatty=lambda: False)) == render.TERMINAL_FALLBACK


@pytest.mark.parametrize("columns", ["²", "٣٠٠", "１２０", "-5", "0", "wide"])
def test_columns_other_than_ascii_digits_is_ignored(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert render.terminal_width(SimpleNamespace(isatty=lambda: False)) == render.TERMINAL_FALLBACK


def test_narrower_than_the_words_allow_every_word_is_still_whole(sample):
    text = render.terminal(sample, width=40)
    headers = render.check_headers(sample)
    kept = [i for i, h in enumerate(headers) if h not in render.CHECKS_DETAIL_COLUMNS]
    assert len(kept) < len(headers) and "left out to fit 40 columns" in text
    for cell in (row[i] for row in render.check_rows(sample) for i in kept):
        assert all(word in text.split() for word in words(cell)), cell


def test_a_word_longer_than_the_width_stands_whole_on_its_line():
    long = "x" * 30
    assert render.wrap(f"a {long} b", 10) == ["a", long, "b"]
    table = render.fit_table(("Reason",), [[f"short {long} words"]], 12)
    assert long in table.split()


def test_compliance_md_prose_and_tables_are_of_sane_width(sample):
    md = render.compliance_md(sample)
    fenced, lines = False, []
    for line in md.splitlines():
        if line.startswith(("```", "~~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    prose = [line for line in lines if not line.startswith("|")]
    assert max(len(line) for line in prose) <= render.MD_WIDTH
    rows = [line for line in lines if line.startswith("|") and not line.startswith("|--")]
    cells = [cell.strip() for line in rows for cell in line.strip("|").split("|")]
    values = {value for _, value in render._summary_pairs(sample)}  # the summary's column may be as wide as prose
    assert [c for c in cells if len(c) > render.MD_CELL and c not in values] == []
    assert all(len(cell) <= render.MD_WIDTH for cell in cells)
    # a long cell went below its table, whole
    assert "[1]: 1 = TEST PASS (verify_accuracy.py, verify_performance.py, every byte)" in md


def skipped_sample(sample: dict) -> dict:
    data = copy.deepcopy(sample)
    reason = "unsupported (conformance/xfails/ipu.txt:30): the Server scenario needs a batching policy that the " \
             "emulator does not have yet, so it is skipped"
    data["tests"] += [{"id": f"conformance/test_performance.py::test_performance[{m}-fp8-Server]", "outcome": "skipped",
                       "duration_s": 0.0, "message": reason, "xfail": None} for m in ("bert-base", "conformer")]
    return data


def test_skipped_tests_are_listed_with_their_whole_reason_in_every_format(sample):
    data = skipped_sample(sample)
    terminal = render.terminal(data, width=80)
    assert "SKIPPED 2 test(s):" in terminal
    flat = " ".join(words(terminal))
    assert "the emulator does not have yet, so it is skipped: test_performance[bert-base-fp8-Server], " \
           "test_performance[conformer-fp8-Server]" in flat
    md = render.compliance_md(data)
    assert "## Skipped tests" in md and "  - `test_performance[conformer-fp8-Server]`" in md
    assert "does not have yet, so it is skipped" in " ".join(words(md))
    assert "<h2>Skipped tests</h2>" in render.results_html(data)


def test_markdown_and_html_have_the_same_sections_in_the_same_order(sample):
    data = skipped_sample(sample)
    titles = [s.title for s in render.sections(data) if s.title]
    md = [line[3:] for line in render.compliance_md(data).splitlines() if line.startswith("## ")]
    page = render.results_html(data)
    html_titles = [part.split("</h2>")[0] for part in page.split("<h2>")[1:]]
    assert md == titles == html_titles
    assert titles[:3] == ["Verdicts", "Failures", "Skipped tests"]


def test_results_html_embeds_its_plots(sample, tmp_path):
    for paths in sample["plots"]["files"].values():
        for rel in paths:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(PNG)
    page = render.results_html(sample, plots_dir=tmp_path)
    assert page.count('src="data:image/png;base64,' + base64.b64encode(PNG).decode()) == 2
    assert 'src="plots/' not in page and "<a href" not in page
    # the report command embeds them too, from beside the results file
    (tmp_path / "results.json").write_text(json.dumps(sample))
    out = tmp_path / "again.html"
    assert cli_main(["report", str(tmp_path / "results.json"), "--format", "html", "--out", str(out)]) == 1
    assert out.read_text() == page
    # a file that is not there stays a link (nothing else to show)
    assert 'src="plots/' in render.results_html(sample, plots_dir=tmp_path / "elsewhere")


def report(nodeid: str, when: str, outcome: str, longrepr=None, records=()) -> SimpleNamespace:
    props = encode_properties([(RECORD_KEY, r) for r in records])
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, passed=outcome == "passed",
                           failed=outcome == "failed", skipped=outcome == "skipped", longrepr=longrepr, duration=1.0,
                           user_properties=props)


def run_test(collector: Collector, nodeid: str, outcome: str, longrepr=None, records=()) -> str:
    for when, state in (("setup", "passed"), ("call", outcome), ("teardown", "passed")):
        collector.add(report(nodeid, when, state, longrepr if when == "call" else None, records))
    return collector.progress(nodeid)


def test_progress_line_gives_the_reports_verdict_and_the_whole_reason(sample):
    collector = Collector()
    bert = [{k: v for k, v in r.items() if k not in ("id", "outcome")} for r in sample["records"]
            if r["test_id"].endswith("test_accuracy[bert-base-fp16]")]
    established = {r["check"]: r.get("established") for r in bert}
    assert established == {"f1@0.99xfp32": True, "f1@0.999xfp32": False}
    # an informational check that is not established leaves the verdict PASS, as the report says
    line = run_test(collector, "t.py::test_accuracy[bert-base-fp16]", "passed", records=bert)
    assert line.endswith(", PASS"), line
    gate = next(r for r in bert if r["gating"])
    gate["established"] = False  # a gate that is not established: PASS*, in the report and here
    line = run_test(collector, "t.py::test_accuracy[bert-base-fp16]#2", "passed", records=bert)
    assert line.endswith(", PASS*"), line
    conformer = next(t for t in sample["tests"] if t["id"].endswith("[conformer-fp8]"))
    line = run_test(collector, conformer["id"], "failed", longrepr=conformer["message"])
    first, *rest = conformer["message"].splitlines()
    assert line.splitlines() == [f"test_accuracy[conformer-fp8]: 3.0 s, FAIL: {first}", *("    " + x for x in rest)]


@pytest.mark.parametrize("verb, wanted", [
    ("compare", ["usage: ipu-conformance report compare [-h] [--format {terminal,md,html}]", "  better    its verdict",
                 "  settings  the runs differ"]),
    ("validate", ["usage: ipu-conformance report validate [-h] RESULTS_JSON",
                  "Exit status: 0 valid; 1 against the schema (naming the first offending field); 4 for a file that "
                  "cannot be read, is"]),
])
def test_each_report_subcommand_has_its_own_formatted_help(verb, wanted, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["report", verb, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for text in wanted:
        assert any(line.startswith(text) for line in lines), (text, out)
    assert max(len(line) for line in lines) <= 120
    with pytest.raises(SystemExit):
        cli_main(["report", "--help"])
    general = capsys.readouterr().out
    assert any(line.startswith("  ipu-conformance report compare OLD.json NEW.json") for line in general.splitlines())
    assert general != out
