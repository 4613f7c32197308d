"""The documentation stays true to the code: every relative link of README.md and docs/*.md resolves (the file, and the
heading an ``#anchor`` names, by GitHub's slug rule), every option of the main job (the suite's group in ``pytest
conformance/ --help``) and of every ``ipu-conformance`` subcommand is documented on the options page, every long
option the pages name exists, and every file of the project a page names; the reports page names every key of results.json, the performance page every key
of ``predict --json``."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from conformance.cli import build_parser
from conformance.hardware.ipu.timing.predict import JSON_KEYS as PREDICT_JSON_KEYS
from tests.sample_results import sample_results

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
OPTIONS_PAGE = DOCS / "options.md"
REPORTS_PAGE = DOCS / "reports.md"
PERFORMANCE_PAGE = DOCS / "performance.md"
CLI = "ipu-conformance"
# an option of the suite's group that identifies the group's section in ``pytest --help``
GROUP_MARKER = "--hardware"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
HELP_OPTION = re.compile(r"^  (?:-\w, )?(--[a-z][\w-]*)")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    lines, fenced = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            fenced = None if fenced == match.group(1) else (fenced or match.group(1))
            continue
        if fenced is None:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (code spans, links and emphasis reduced to their text),
    lower-cased, every character but letters, marks, digits, connector punctuation, spaces and hyphens removed, each
    space a hyphen."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text)
    text = re.sub(r"<[^>]+>", "", text)
    kept = (ch for ch in text.lower()
            if ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc")
    return "".join(kept).replace(" ", "-")


def headings(path: Path) -> list[tuple[int, int, str]]:
    """(line, level, text) of every ATX heading outside code blocks."""
    found = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            found.append((number, len(match.group(1)), match.group(2)))
    return found


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors GitHub gives a page: one per heading (a repeated slug gets -1, -2, ...) and explicit HTML ids."""
    seen: dict[str, int] = {}
    found = set()
    for _, _, text in headings(path):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(HTML_ANCHOR.findall(path.read_text(encoding="utf-8")))
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image of a page, outside code blocks and code spans."""
    found = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        bare = CODE_SPAN.sub("", line)
        found.extend((number, target) for target in LINK.findall(bare))
        match = REFERENCE_LINK.match(bare)
        if match:
            found.append((number, match.group(1)))
    return found


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I))


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        where = f"{path.relative_to(REPO)}:{number}: link {target!r}"
        if not target:
            problems.append(f"{where}: empty target")
            continue
        if _is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{where}: {linked.relative_to(REPO) if linked.is_relative_to(REPO) else linked} "
                            f"does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: {linked.relative_to(REPO)} has no heading with anchor #{anchor} "
                            f"(its anchors: {', '.join(sorted(anchors(linked)))})")
        elif anchor and linked.suffix != ".md":
            problems.append(f"{where}: an anchor into {linked.relative_to(REPO)}, which is not a Markdown page")
    return problems


@cache
def pytest_help() -> str:
    """``pytest conformance/ --help`` as a user runs it, once."""
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--help", "-p", "no:cacheprovider"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"pytest conformance/ --help exited {done.returncode}:\n{done.stderr[-2000:]}"
    return done.stdout


def help_sections(text: str) -> list[list[str]]:
    """The sections of a ``--help`` text: a line at column 0 ending with ':' starts one."""
    sections: list[list[str]] = []
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            sections.append([line])
        elif sections:
            sections[-1].append(line)
    return sections


def suite_options() -> list[str]:
    """The long options of the suite's group in ``pytest conformance/ --help``."""
    sections = [[m.group(1) for line in lines if (m := HELP_OPTION.match(line))]
                for lines in help_sections(pytest_help())]
    groups = [options for options in sections if GROUP_MARKER in options]
    assert len(groups) == 1, f"expected one section of pytest --help holding {GROUP_MARKER}, found {len(groups)}"
    return groups[0]


@cache
def cli_commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every parser of ``ipu-conformance``, keyed by its command path (() for the command itself)."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk((*path, name), sub)

    walk((), build_parser())
    return found


def cli_options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions
            if action.help != argparse.SUPPRESS
            for option in action.option_strings if option.startswith("--") and option != "--help"]


def documented(text: str, option: str) -> bool:
    """Whether a code span of ``text`` starts with ``option`` (``--report-dir`` or ``--report-dir DIR``)."""
    return any(re.match(re.escape(option) + r"(?![\w-])", span.strip())
               for _, span in CODE_SPAN.findall(text))


def sections(path: Path) -> list[tuple[str, str]]:
    """(heading, text) of every heading of a page: the text from the heading up to the next heading of its level or
    higher."""
    lines = path.read_text(encoding="utf-8").splitlines()
    marks = headings(path)
    found = []
    for index, (number, level, title) in enumerate(marks):
        end = next((n for n, lv, _ in marks[index + 1:] if lv <= level), len(lines) + 1)
        found.append((title, "\n".join(lines[number - 1:end - 1])))
    return found


def section(path: Path, title: str) -> str:
    found = [text for heading, text in sections(path) if heading == title]
    assert len(found) == 1, f"{path.relative_to(REPO)} has {len(found)} headings {title!r}, expected one"
    return found[0]


def command_sections(path: Path) -> dict[str, str]:
    """The sections whose heading's first code span is a command, keyed by that command."""
    return {span.group(2).strip(): text for heading, text in sections(path) if (span := CODE_SPAN.search(heading))}


def test_every_page_has_a_title_and_the_index_lists_every_page():
    index = DOCS / "README.md"
    assert index.exists(), "docs/README.md, the index of the documentation, is missing"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in links(index)
              if not _is_external(target)}
    for page in pages():
        assert headings(page) and headings(page)[0][1] == 1, f"{page.relative_to(REPO)} does not begin with a # title"
        if page.parent == DOCS and page != index:
            assert page.resolve() in linked, f"docs/README.md does not link {page.relative_to(REPO)}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


# a path of the project in a code span (``conformance/targets/accuracy.toml``, ``models/tables/<model>/fp8.toml``: a
# ``<placeholder>`` stands for any name)
PROJECT_PATH = re.compile(r"(?<![\w/.-])((?:boundedio|conformance|models|reference|scripts|tests)/[\w./<>*-]*"
                          r"\.(?:json|md|py|toml|txt))")


def named_paths(page: Path) -> list[str]:
    return [path for line in page.read_text(encoding="utf-8").splitlines() for span in CODE_SPAN.finditer(line)
            for path in PROJECT_PATH.findall(span.group(2))]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_a_page_names_exists(page):
    """Where the gates, targets, profiles and settings live (and every other file named in a code span) is true."""
    missing = [path for path in named_paths(page) if not list(REPO.glob(re.sub(r"<[^>]+>", "*", path)))]
    assert not missing, f"{page.relative_to(REPO)} names files that do not exist: {missing}"


def test_the_named_file_check_sees_placeholders_and_line_numbers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("`models/tables/<model>/fp8.toml`, `models/tables/widedeep/performance.toml:14: a = 1` and "
                    "`conformance/targets/nothing.toml`\n")
    assert named_paths(page) == ["models/tables/<model>/fp8.toml", "models/tables/widedeep/performance.toml",
                                 "conformance/targets/nothing.toml"]
    assert not list(REPO.glob("conformance/targets/nothing.toml")) and list(REPO.glob("models/tables/*/fp8.toml"))


def test_main_job_options_are_on_the_options_page():
    text = OPTIONS_PAGE.read_text(encoding="utf-8")
    missing = [option for option in suite_options() if not documented(text, option)]
    assert not missing, (f"{OPTIONS_PAGE.relative_to(REPO)} does not document {', '.join(missing)} "
                         f"(listed by pytest conformance/ --help; expected a code span beginning with each)")


def test_every_subcommand_option_is_in_its_section_of_the_options_page():
    sections = command_sections(OPTIONS_PAGE)
    problems = []
    for path, parser in cli_commands().items():
        # a sub-subcommand without a heading of its own is documented in its parent's section
        scope = next((path[:n] for n in range(len(path), -1, -1) if " ".join((CLI, *path[:n])) in sections), None)
        name = " ".join((CLI, *path))
        if scope is None or (len(path) == 1 and scope != path):
            problems.append(f"no heading `{name}` on the options page")
            continue
        text = sections[" ".join((CLI, *scope))]
        problems += [f"`{name}` {option} is not in the section `{' '.join((CLI, *scope))}`"
                     for option in cli_options(parser) if not documented(text, option)]
    assert not problems, "\n".join(problems)


def test_every_long_option_the_pages_name_exists():
    known = set(LONG_OPTION.findall(pytest_help()))
    known.update(option for parser in cli_commands().values() for action in parser._actions
                 for option in action.option_strings)
    unknown = [f"{page.relative_to(REPO)}:{number}: {option}" for page in pages()
               for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
               for option in LONG_OPTION.findall(line) if option not in known]
    assert not unknown, "options named in the documentation that neither pytest nor ipu-conformance has:\n" + \
        "\n".join(unknown)


def test_the_reports_page_names_every_key_of_results_json():
    sample = sample_results()
    text = section(REPORTS_PAGE, "results.json")
    missing = [f"top-level key {key!r}" for key in sample if f"`{key}`" not in text]
    missing += [f"record field {key!r}" for key in sample["records"][0] if f"`{key}`" not in text]
    assert not missing, f"the results.json section of {REPORTS_PAGE.relative_to(REPO)} lacks " + ", ".join(missing)


def test_slug_follows_githubs_rule():
    assert slug("Reports and the release verdict") == "reports-and-the-release-verdict"
    assert slug("`ipu-conformance report compare`") == "ipu-conformance-report-compare"
    assert slug("TEST01, TEST04: the audits") == "test01-test04-the-audits"
    assert slug("What `--baseline` does (and *not*)") == "what---baseline-does-and-not"
    assert slug("FP8: F143 & F152") == "fp8-f143--f152"
    assert slug("results.json") == "resultsjson"
    assert slug("snake_case stays") == "snake_case-stays"


def test_the_performance_page_names_every_key_of_predict_json():
    text = section(PERFORMANCE_PAGE, "predict")
    missing = [key for key in PREDICT_JSON_KEYS if f"`{key}`" not in text]
    assert not missing, f"the predict section of {PERFORMANCE_PAGE.relative_to(REPO)} lacks the --json keys {missing}"
