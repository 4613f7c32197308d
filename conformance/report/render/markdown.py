"""``compliance.md``: :func:`~conformance.report.render.document.sections` as Markdown."""

from __future__ import annotations

from tabulate import tabulate

from conformance.report.render.document import (
    Figures, Items, MD_CELL, MD_WIDTH, Paragraph, Preformatted, Subheading, Table, sections,
)
from conformance.report.render.summary import verdict_text
from conformance.report.render.width import wrap


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_inline(spans) -> str:
    marks = {"code": "`", "bold": "**"}
    return "".join(f"{marks.get(s.style, '')}{s.text}{marks.get(s.style, '')}" for s in spans if s.style != "badge")


def _md_table(table: Table) -> list[str]:
    """The table, each cell longer than :data:`MD_CELL` (:data:`MD_WIDTH` in the summary's column of values)
    replaced by a numbered note listed below it: a Markdown row cannot wrap."""
    longest = MD_WIDTH if table.css == "summary" else MD_CELL
    notes: list[str] = []

    def cell(text) -> str:
        text = _md_cell(text)
        if len(text) <= longest:
            return text
        notes.append(text)
        return f"[{len(notes)}]"

    rows = [[cell(c) for c in row] for row in table.rows]
    out = [tabulate(rows, headers=[_md_cell(h) for h in table.headers], tablefmt="github", disable_numparse=True)]
    if notes:
        out.append("")
        out += [line for n, text in enumerate(notes, 1) for line in wrap(text, MD_WIDTH, "    ", f"[{n}]: ")]
    return out


def _fence(text: str) -> list[str]:
    fence = "~~~~" if "```" in text else "```"
    return [fence + "text", text.rstrip("\n"), fence]


def _md_block(block) -> list[str]:
    if isinstance(block, Paragraph):
        return wrap(block.text, MD_WIDTH)
    if isinstance(block, Table):
        return _md_table(block)
    if isinstance(block, Items):
        return [line for spans, subs in block.items
                for line in [*wrap(_md_inline(spans), MD_WIDTH, "  ", "- "),
                             *(x for sub in subs for x in wrap(_md_inline(sub), MD_WIDTH, "    ", "  - "))]]
    if isinstance(block, Subheading):
        return ["### " + _md_inline(block.spans)]
    if isinstance(block, Preformatted):
        return _fence(block.text)
    if isinstance(block, Figures):
        return [f"### {block.key}", ""] + [f"![{block.key} {p.rsplit('/', 1)[-1]}]({p})" for p in block.paths]
    raise TypeError(f"no Markdown for {type(block).__name__}")


def compliance_md(results: dict) -> str:
    """:func:`sections` as Markdown: the summary first (one screen with the verdict matrix), prose wrapped at
    :data:`MD_WIDTH` columns, long table cells as notes below their tables, plots as relative image links."""
    hw, profile = results["hardware"]["name"], results["settings"]["profile"]
    out = [f"# Conformance of `{hw}`, profile `{profile}`: {verdict_text(results)}", ""]
    for section in sections(results):
        if section.title:
            out += [f"## {section.title}", ""]
        for block in section.blocks:
            out += [*_md_block(block), ""]
    return "\n".join(out).rstrip() + "\n"


def summary_lines(markdown: str) -> int:
    """How many lines of ``compliance.md`` come before the first section after the matrix (the summary part)."""
    lines = markdown.splitlines()
    seen_matrix = False
    for index, line in enumerate(lines):
        if line.startswith("## "):
            if seen_matrix:
                return index
            seen_matrix = line == "## Verdicts"
    return len(lines)
