"""Two runs side by side (``ipu-conformance report compare OLD NEW``): the checks whose value, target or verdict
changed, with the delta, and whether a verdict got worse.

Records are matched by their stable id (``kind/model/precision/scenario/check``); a record on one side only is listed as
added or removed. A verdict is worse when it moves right in PASS, PASS*, XFAIL, FAIL, for a gated check; a run
verdict that moves right in PASS, NO VERDICT, FAIL is worse too.
"""

from __future__ import annotations

import html

from tabulate import tabulate

from conformance.report.render import VERDICT_ORDER, fmt, verdict

HEADERS = ("Check", "Old", "New", "Delta", "Target", "Old verdict", "New verdict", "Change")
RUN_ORDER = ("PASS", "NO VERDICT", "FAIL")  # a run that judged nothing is worse than one that passed


def _rank(record: dict | None) -> int | None:
    if record is None or not record.get("gating", True):
        return None
    v = verdict(record)
    return VERDICT_ORDER.index(v) if v in VERDICT_ORDER else None


def _delta(old, new) -> str:
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)) or old == new:
        return ""
    text = f"{new - old:+.4g}"
    return text + (f" ({(new - old) / abs(old):+.2%})" if old else "")


def changes(old: dict, new: dict) -> list[dict]:
    """One dict per record id whose value, target or verdict differs (or that one side lacks), in the new run's order."""
    before = {r["id"]: r for r in old["records"]}
    after = {r["id"]: r for r in new["records"]}
    found = []
    for rid in [*after, *(i for i in before if i not in after)]:
        a, b = before.get(rid), after.get(rid)
        same = a is not None and b is not None and (a.get("value"), a.get("target"), verdict(a)) == \
            (b.get("value"), b.get("target"), verdict(b))
        if same:
            continue
        rank_a, rank_b = _rank(a), _rank(b)
        if a is None:
            change = "added"
        elif b is None:
            change = "removed"
        elif rank_a is not None and rank_b is not None and rank_b > rank_a:
            change = "WORSE"
        elif rank_a is not None and rank_b is not None and rank_b < rank_a:
            change = "better"
        else:
            change = "changed"
        target = [fmt(r.get("target")) for r in (a, b) if r is not None]
        op = (b or a)["op"]
        found.append({
            "id": rid, "old": fmt(a.get("value")) if a else "", "new": fmt(b.get("value")) if b else "",
            "delta": _delta(a.get("value") if a else None, b.get("value") if b else None),
            "target": f"{op} {target[0]}" if len(set(target)) == 1 else f"{op} {target[0]} -> {target[1]}",
            "old_verdict": verdict(a) if a else "", "new_verdict": verdict(b) if b else "", "change": change,
        })
    return found


def worsened(old: dict, new: dict) -> bool:
    """Whether a gated check's verdict, or the run's verdict, got worse."""
    return any(c["change"] == "WORSE" for c in changes(old, new)) or \
        RUN_ORDER.index(new["verdict"]) > RUN_ORDER.index(old["verdict"])


def _rows(found: list[dict]) -> list[list[str]]:
    return [[c["id"], c["old"], c["new"], c["delta"], c["target"], c["old_verdict"], c["new_verdict"], c["change"]]
            for c in found]


def _heading(old: dict, new: dict, old_name: str, new_name: str) -> list[str]:
    def run(name, data):
        commit = (data["git"].get("commit") or "unknown")[:12]
        return f"{name}: {data['verdict']}, {data['hardware']['name']} profile {data['settings']['profile']}, " \
               f"commit {commit}, {data['created']}"
    return [f"old {run(old_name, old)}", f"new {run(new_name, new)}"]


def _summary(old: dict, new: dict, found: list[dict]) -> str:
    worse = sum(c["change"] == "WORSE" for c in found)
    verdict_text = "worse" if worsened(old, new) else "not worse"
    return f"{len(found)} check(s) changed, {worse} verdict(s) worse; run verdict {old['verdict']} -> " \
           f"{new['verdict']}: {verdict_text}"


def terminal(old: dict, new: dict, old_name: str = "OLD", new_name: str = "NEW") -> str:
    found = changes(old, new)
    lines = _heading(old, new, old_name, new_name)
    lines += ["", tabulate(_rows(found), headers=HEADERS, tablefmt="simple", disable_numparse=True)] if found \
        else ["", "No check changed."]
    return "\n".join([*lines, "", _summary(old, new, found)]) + "\n"


def markdown(old: dict, new: dict, old_name: str = "OLD", new_name: str = "NEW") -> str:
    found = changes(old, new)
    out = ["# Comparison of two conformance runs", "", *(f"- {line}" for line in _heading(old, new, old_name, new_name)),
           "", _summary(old, new, found), ""]
    if found:
        rows = [[str(cell).replace("|", "\\|") for cell in row] for row in _rows(found)]
        out += [tabulate(rows, headers=HEADERS, tablefmt="github", disable_numparse=True), ""]
    return "\n".join(out)


def as_html(old: dict, new: dict, old_name: str = "OLD", new_name: str = "NEW") -> str:
    found = changes(old, new)
    esc = html.escape
    rows = "".join("<tr" + (' class="worse"' if row[-1] == "WORSE" else "") + ">"
                   + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in _rows(found))
    table = (f"<table><thead><tr>{''.join(f'<th>{esc(h)}</th>' for h in HEADERS)}</tr></thead><tbody>{rows}</tbody>"
             f"</table>") if found else "<p>No check changed.</p>"
    style = ("body{font:14px system-ui,sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccd;"
             "padding:3px 8px}th{background:#f3f5f7}tr.worse td{background:#fbd5d5}")
    heading = "".join(f"<li>{esc(line)}</li>" for line in _heading(old, new, old_name, new_name))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Comparison of two conformance runs"
            f"</title><style>{style}</style></head><body><h1>Comparison of two conformance runs</h1><ul>{heading}</ul>"
            f"<p>{esc(_summary(old, new, found))}</p>{table}</body></html>\n")


FORMATS = {"terminal": terminal, "md": markdown, "html": as_html}
