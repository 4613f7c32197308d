"""``results.html``: one self-contained page (inline CSS, a few lines of script to sort tables, the plots embedded as
data: URIs), the sections of ``compliance.md`` in the same order. Verdicts are coloured badges; the detailed checks
table sorts by a click on a header and can be filtered to what did not pass; the MLPerf table shows the columns people
read first, the others under "all columns"."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from conformance.report.render.document import (
    Figures, Items, Paragraph, Preformatted, Subheading, Table, sections, title,
)
from conformance.report.render.verdicts import VERDICT_ORDER, verdict


PLOT_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_EMBEDDED_PLOT = 16 * 1024 * 1024  # bytes: a larger plot file stays a link beside the page


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;
color:#1d2125}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px}th,td{border:1px solid #d8dde3;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f5f7;font-weight:600}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:after{content:" \\2195";color:#99a}
table.summary th{background:none;font-weight:600;white-space:nowrap}table.summary td,table.summary th{border:none;
padding:1px 14px 1px 0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.matrix{font-size:12px}table.matrix td,table.matrix th{padding:2px 5px}
.v{display:inline-block;min-width:44px;padding:0 6px;border-radius:3px;font-weight:600;font-size:12px;text-align:center}
.PASS{background:#d9f2df;color:#14532d}.PASSx{background:#fdf3c8;color:#6b4e00}.FAIL{background:#fbd5d5;color:#8b1a1a}
.XFAIL{background:#e4e7ec;color:#3b4250}.INFO{background:#eef2f7;color:#5a6472}
.verdict{font-size:18px;padding:2px 10px}
pre{background:#f7f7f9;border:1px solid #e2e4e8;padding:8px 10px;white-space:pre-wrap;font-size:12.5px}
details>summary{cursor:pointer;margin:6px 0}.note{color:#4f5761;font-size:13px}
.sim{color:#6b4e00;font-style:italic}img{max-width:100%;border:1px solid #e2e4e8;margin:4px 0}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:10px}
"""

SCRIPT = """
function sortTable(th){const table=th.closest('table'),body=table.tBodies[0],i=[...th.parentNode.children].indexOf(th);
const asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';
const key=r=>{const t=r.children[i].innerText.trim(),n=parseFloat(t);return isNaN(n)?t.toLowerCase():n;};
[...body.rows].sort((a,b)=>{const x=key(a),y=key(b);return (x>y?1:x<y?-1:0)*(asc?1:-1);}).forEach(r=>body.appendChild(r));}
function onlyProblems(box){document.querySelectorAll('#checks tbody tr').forEach(r=>{
r.style.display=box.checked&&r.dataset.v==='PASS'?'none':'';});}
"""


def esc(text) -> str:
    return html.escape(str(text))


def badge(verdict: str, big: bool = False) -> str:
    if not verdict:
        return ""
    css = {"PASS*": "PASSx"}.get(verdict, verdict if verdict in ("PASS", "FAIL", "XFAIL") else "INFO")
    return f'<span class="v {css}{" verdict" if big else ""}">{esc(verdict)}</span>'


def _cell(text: str) -> str:
    """A matrix or table cell whose first word is a verdict: that word as a badge."""
    head, _, rest = str(text).partition(" ")
    if head in VERDICT_ORDER:
        return f"{badge(head)} {esc(rest)}"
    if text in ("PASS (info)", "BELOW (info)"):
        return badge(text)
    return esc(text)


def _html_inline(spans) -> str:
    tags = {"code": "code", "bold": "b"}
    return "".join(badge(s.text) + " " if s.style == "badge" else
                   f"<{tags[s.style]}>{esc(s.text)}</{tags[s.style]}>" if s.style in tags else esc(s.text) for s in spans)


def _summary_html(table: Table) -> str:
    rows = []
    for key, value in table.rows:
        if key == "verdict":
            head, _, rest = value.partition(" ")
            shown = f"{badge(head, big=True)} {esc(rest)}"
        else:
            shown = f'<span class="sim">{esc(value)}</span>' if key == "performance figures" and "simulated" in value \
                else esc(value)
        rows.append(f"<tr><th>{esc(key)}</th><td>{shown}</td></tr>")
    return '<table class="summary">' + "".join(rows) + "</table>"


def _html_table(table: Table) -> str:
    if table.css == "summary":
        return _summary_html(table)
    attrs = (f' class="{table.css}"' if table.css else "") + (f' id="{table.table_id}"' if table.table_id else "")
    onclick = ' onclick="sortTable(this)"' if table.css == "sortable" else ""
    out = []
    if table.verdicts is not None:
        out.append('<p class="note">Click a column to sort.</p><label><input type="checkbox" '
                   'onchange="onlyProblems(this)"> show only checks that did not pass</label>')
    out.append(f"<table{attrs}><thead><tr>" + "".join(f"<th{onclick}>{esc(h)}</th>" for h in table.headers)
               + "</tr></thead><tbody>")
    for index, row in enumerate(table.rows):
        extra = f' data-v="{esc(table.verdicts[index].split(" ")[0])}"' if table.verdicts is not None else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if i in table.numeric else f"<td>{_cell(c)}</td>"
                        for i, c in enumerate(row))
        out.append(f"<tr{extra}>{cells}</tr>")
    out.append("</tbody></table>")
    if table.more is not None:
        out += ["<details><summary>all columns (as in results.csv)</summary>", _html_table(table.more), "</details>"]
    return "".join(out)


def _plot_source(path: str, plots_dir) -> str:
    """The image's ``src``: the file's bytes as a data: URI (the page needs nothing beside it), or the relative path
    where the file is not there to read, too large, or of a type not embedded."""
    kind = PLOT_TYPES.get(Path(path).suffix.lower())
    if plots_dir is None or kind is None:
        return path
    try:
        with open(Path(plots_dir) / path, "rb") as handle:
            data = handle.read(MAX_EMBEDDED_PLOT + 1)
    except OSError:
        return path
    if len(data) > MAX_EMBEDDED_PLOT:
        return path
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _html_block(block, plots_dir) -> str:
    if isinstance(block, Paragraph):
        return f'<p class="note">{esc(block.text)}</p>'
    if isinstance(block, Table):
        return _html_table(block)
    if isinstance(block, Items):
        items = "".join(f"<li>{_html_inline(spans)}"
                        + (f"<ul>{''.join(f'<li>{_html_inline(sub)}</li>' for sub in subs)}</ul>" if subs else "")
                        + "</li>" for spans, subs in block.items)
        return f"<ul>{items}</ul>"
    if isinstance(block, Subheading):
        return f"<h3>{_html_inline(block.spans)}</h3>"
    if isinstance(block, Preformatted):
        return f"<pre>{esc(block.text)}</pre>"
    if isinstance(block, Figures):
        images = "".join(f'<img src="{esc(_plot_source(p, plots_dir))}" alt="{esc(block.key)} '
                         f'{esc(p.rsplit("/", 1)[-1])}" loading="lazy">' for p in block.paths)
        return f'<details><summary>{esc(block.key)}</summary><div class="plots">{images}</div></details>'
    raise TypeError(f"no HTML for {type(block).__name__}")


def results_html(results: dict, plots_dir=None) -> str:
    """:func:`sections` as one HTML page; the plots are read from ``plots_dir`` (the report directory) and embedded,
    so the page alone shows them (without it, or for a file that is not there, the page links them)."""
    page_title = title(results)
    body = [f"<h1>{esc(page_title)}</h1>"]
    for section in sections(results):
        if section.title:
            body.append(f"<h2>{esc(section.title)}</h2>")
        body += [_html_block(block, plots_dir) for block in section.blocks]
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(page_title)}</title>"
            f"<style>{CSS}</style><script>{SCRIPT}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
