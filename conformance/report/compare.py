"""Two runs side by side (``ipu-conformance report compare OLD NEW``): the checks whose value, target or verdict
changed, with the delta, each classified, and what the run's verdict did.

Records are matched by their stable id (``kind/model/precision/scenario/check``); a record on one side only is listed as
added or removed. A gated check's verdict is better or worse as it moves in PASS, PASS*, XFAIL, FAIL; the run's verdict
as it moves in PASS, NO VERDICT, FAIL. Where the two runs differ in a setting that changes the figures
(:data:`FIGURE_SETTINGS`: the sample count, batch size, checkpoint, data set or calibration of the check's model; the
profile, device or LoadGen clock of the run), a change that the setting explains is a change of settings, not better or
worse: a value that moved, or a gate that went between PASS and PASS* (its 95% interval narrows or widens with the
sample count). A gate that went to or from FAIL stays worse or better whatever the settings. Runs of two hardware
targets are not compared at all (:func:`refusal`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from tabulate import tabulate

from conformance.report.render import NOT_ESTABLISHED, VERDICT_ORDER, fit_table, fmt, terminal_width, verdict, wrap
from conformance.report.record import recorded_settings

HEADERS = ("Check", "Old", "New", "Delta", "Target", "Old verdict", "New verdict", "Change")
RUN_ORDER = ("PASS", "NO VERDICT", "FAIL")  # a run that judged nothing is worse than one that passed
# what a check's change is classified as; WORSE in capitals, as it fails the comparison
BETTER, WORSE, SETTINGS, CHANGED, ADDED, REMOVED = "better", "WORSE", "settings", "changed", "added", "removed"

# How each results.json ``settings`` key is compared (Recorded.compare and .label of its field): settings that change
# the figures, run-wide (key -> how it is named) ...
RUN_SETTINGS = {key: meta.label for key, meta in recorded_settings().items() if meta.compare == "figures"}
# ... and per model (key -> how it is named; results.json holds model -> value), with the profile's batch size after
# the sample count
PER_MODEL = {key: meta.label for key, meta in recorded_settings().items() if meta.compare == "model"}
MODEL_SETTINGS = (PER_MODEL["samples"], "batch size", *(name for key, name in PER_MODEL.items() if key != "samples"))
FIGURE_SETTINGS = (*RUN_SETTINGS.values(), *MODEL_SETTINGS)
# Settings that choose which checks run, not what they measure: a check outside the choice is added or removed.
SELECTION_SETTINGS = {key: meta.label for key, meta in recorded_settings().items() if meta.compare == "selection"}


@dataclass(frozen=True)
class Difference:
    """One setting in which two runs differ: ``model`` is None for a setting of the whole run."""

    setting: str
    old: object
    new: object
    model: str | None = None

    @property
    def changes_figures(self) -> bool:
        return self.setting in FIGURE_SETTINGS

    def describe(self) -> str:
        where = f" of {self.model}" if self.model else ""
        return f"{self.setting}{where} {shown(self.old)} -> {shown(self.new)}"


def shown(value) -> str:
    if value is None:
        return "default"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _model_settings(data: dict, model: str) -> dict[str, object]:
    """The per-model settings of one run, as results.json records them; a key an older file lacks is left out."""
    settings, profile = data["settings"], data.get("profile") or {}
    given = settings.get("samples")
    found = {}
    if given is not None and model in profile.get("samples", {}):  # --samples MODEL=N, then --samples N (*), then the profile's
        found[PER_MODEL["samples"]] = given.get(model, given.get("*", profile["samples"][model]))
    if model in profile.get("batch_size", {}):
        found["batch size"] = profile["batch_size"][model]
    for key, name in PER_MODEL.items():
        if key == "samples":
            continue
        if settings.get(key) is not None:
            found[name] = settings[key].get(model)
    return found


def differences(old: dict, new: dict) -> list[Difference]:
    """The settings in which two results records differ: those of the whole run, then those of each model both ran
    (a setting that one file does not record, being older, is not compared)."""
    found = []
    for key, name in {**RUN_SETTINGS, **SELECTION_SETTINGS}.items():
        a, b = old["settings"].get(key), new["settings"].get(key)
        if a is not None and b is not None and a != b:
            found.append(Difference(name, a, b))
    both = [m for m in new["settings"]["models"] if m in old["settings"]["models"]]
    for model in both:
        a, b = _model_settings(old, model), _model_settings(new, model)
        found += [Difference(name, a[name], b[name], model) for name in MODEL_SETTINGS
                  if name in a and name in b and a[name] != b[name]]
    return found


def refusal(old: dict, new: dict) -> str:
    """Why two runs cannot be compared at all (empty when they can): another hardware target measures other figures."""
    a, b = old["settings"]["hardware"], new["settings"]["hardware"]
    if a != b:
        return f"the runs are of different hardware ({a!r} and {b!r}); compare runs of the same hardware"
    return ""


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


def _classify(a: dict, b: dict, explained: bool) -> str:
    """The change of one check both runs hold; ``explained``: the runs differ in a setting of its figures."""
    rank_a, rank_b = _rank(a), _rank(b)
    if rank_a is None or rank_b is None or rank_a == rank_b:
        return SETTINGS if explained else CHANGED
    if explained and {verdict(a), verdict(b)} == {"PASS", NOT_ESTABLISHED}:
        return SETTINGS  # the interval narrowed or widened with the samples: not a change in the hardware
    return WORSE if rank_b > rank_a else BETTER


def changes(old: dict, new: dict) -> list[dict]:
    """One dict per record id whose value, target or verdict differs (or that one side lacks), in the new run's order;
    ``change`` is one of better, WORSE, settings, changed, added, removed."""
    before = {r["id"]: r for r in old["records"]}
    after = {r["id"]: r for r in new["records"]}
    figure_models = {d.model for d in differences(old, new) if d.changes_figures}
    found = []
    for rid in [*after, *(i for i in before if i not in after)]:
        a, b = before.get(rid), after.get(rid)
        same = a is not None and b is not None and (a.get("value"), a.get("target"), verdict(a)) == \
            (b.get("value"), b.get("target"), verdict(b))
        if same:
            continue
        if a is None:
            change = ADDED
        elif b is None:
            change = REMOVED
        else:
            change = _classify(a, b, None in figure_models or b["model"] in figure_models)
        target = [fmt(r.get("target")) for r in (a, b) if r is not None]
        op = (b or a)["op"]
        found.append({
            "id": rid, "old": fmt(a.get("value")) if a else "", "new": fmt(b.get("value")) if b else "",
            "delta": _delta(a.get("value") if a else None, b.get("value") if b else None),
            "target": f"{op} {target[0]}" if len(set(target)) == 1 else f"{op} {target[0]} -> {target[1]}",
            "old_verdict": verdict(a) if a else "", "new_verdict": verdict(b) if b else "", "change": change,
        })
    return found


def run_change(old: dict, new: dict) -> str:
    """What the run's verdict did: better (FAIL -> PASS), WORSE (PASS -> FAIL) or unchanged."""
    a, b = RUN_ORDER.index(old["verdict"]), RUN_ORDER.index(new["verdict"])
    return WORSE if b > a else BETTER if b < a else "unchanged"


def worsened(old: dict, new: dict) -> bool:
    """Whether a gated check's verdict, or the run's verdict, got worse (a change of settings is neither)."""
    return any(c["change"] == WORSE for c in changes(old, new)) or run_change(old, new) == WORSE


def warnings_of(old: dict, new: dict) -> list[str]:
    """What a reader must know before trusting the comparison: settings that differ, and a failed old run."""
    found = differences(old, new)
    figures = [d.describe() for d in found if d.changes_figures]
    selection = [d.describe() for d in found if not d.changes_figures]
    lines = []
    if figures:
        lines.append(f"WARNING: the runs differ in settings that change the figures: {'; '.join(figures)}. A change "
                     f"these settings explain is marked '{SETTINGS}', not better or worse.")
    if selection:
        lines.append(f"note: the runs chose different checks: {'; '.join(selection)} (checks on one side only are "
                     f"'{ADDED}' or '{REMOVED}').")
    return lines


def _rows(found: list[dict]) -> list[list[str]]:
    return [[c["id"], c["old"], c["new"], c["delta"], c["target"], c["old_verdict"], c["new_verdict"], c["change"]]
            for c in found]


def _heading(old: dict, new: dict, old_name: str, new_name: str) -> list[str]:
    def run(name, data):
        commit = (data["git"].get("commit") or "unknown")[:12]
        return f"{name}: {data['verdict']}, {data['hardware']['name']} profile {data['settings']['profile']}, " \
               f"commit {commit}, {data['created']}"
    return [f"old {run(old_name, old)}", f"new {run(new_name, new)}", *warnings_of(old, new)]


def _summary(old: dict, new: dict, found: list[dict]) -> str:
    counts = {kind: sum(c["change"] == kind for c in found) for kind in (BETTER, WORSE, SETTINGS, CHANGED, ADDED, REMOVED)}
    parts = [f"{n} {kind.lower() if kind == WORSE else kind}" for kind, n in counts.items() if n]
    outcome = "worse: a verdict got worse" if worsened(old, new) else "not worse"
    return f"{len(found)} check(s) changed" + (f" ({', '.join(parts)})" if parts else "") + \
        f"; run verdict {old['verdict']} -> {new['verdict']}: {run_change(old, new).lower()}; comparison: {outcome}"


DETAIL_COLUMNS = ("Target", "Old", "New")  # left out, in this order, where the table does not fit the terminal


def terminal(old: dict, new: dict, old_name: str = "OLD", new_name: str = "NEW", width: int | None = None) -> str:
    """The comparison for a terminal or a CI log: every line fits ``width`` (default: ``COLUMNS``), broken between
    words."""
    width = terminal_width() if width is None else width
    found = changes(old, new)
    lines = [line for text in _heading(old, new, old_name, new_name) for line in wrap(text, width, "  ")]
    lines += ["", fit_table(HEADERS, _rows(found), width, DETAIL_COLUMNS)] if found else ["", "No check changed."]
    return "\n".join([*lines, "", *wrap(_summary(old, new, found), width, "  ")]) + "\n"


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
