"""What every rendering of a run says: its summary, checks, counts, verdict line, skipped tests, known failures,
and how to establish a figure that was not established."""

from __future__ import annotations

import math
import shlex

from conformance.report.checks import provenance, timing_model_of
from conformance.report.judged import judged_by_model
from conformance.report.render.verdicts import NOT_ESTABLISHED, VERDICT_ORDER, fmt, verdict
from conformance.targets.profiles import RELEASE_PROFILE, load_profiles, profile_role


TABLE_HEADERS = ("Model", "Precision", "Scenario", "Check", "Value", "Target", "Units", "Verdict")
# the column of the checks table that says how a figure was obtained; shown when some record says so
TIMING_HEADER = "Timing"


def _establishing_command(results: dict, model: str, precision: str, samples: int) -> str:
    """The run that repeats one accuracy test on at least ``samples`` samples (the run's hardware, chip and data kept):
    the release gate's profile where it runs that many of the suite's samples, else ``--samples``."""
    settings = results.get("settings") or {}
    release = load_profiles()[RELEASE_PROFILE].samples.get(model, 0)
    if model not in (settings.get("datasets") or {}) and release >= samples:
        size = f" --profile {RELEASE_PROFILE}"
    else:
        size = f" --samples {model}={samples}"
    hardware = settings.get("hardware") or results["hardware"]["name"]
    device = f" --device {settings['device']}" if settings.get("device") else ""
    data = "".join(f" --{option} {model}={shlex.quote(str(given[model]))}"
                   for option, given in (("checkpoint", settings.get("checkpoints") or {}),
                                         ("dataset", settings.get("datasets") or {}))
                   if model in given)
    return (f"pytest conformance/test_accuracy.py --hardware {hardware}{device} --model {model} --precision "
            f"{precision}{data}{size}")


def establishing(results: dict) -> list[str]:
    """Per model and precision with gated accuracy checks passed but not established (PASS*): the units it ran, the
    units that would establish them (``details.units_needed`` at the proportions seen, else at least
    ``details.units_to_establish``) and the command that runs that many samples; then each audit the host's run-to-run
    spread left open (``details.host_noise``)."""
    wanted: dict[tuple[str, str], dict] = {}
    for record in results["records"]:
        details = record.get("details") or {}
        if (record["kind"] != "accuracy" or verdict(record) != NOT_ESTABLISHED or "label_floor" in details
                or not isinstance(details.get("units"), int) or not details.get("units")):
            continue
        needed, exact = details.get("units_needed"), True
        if not isinstance(needed, int):
            needed, exact = details.get("units_to_establish"), False
        if not isinstance(needed, int):
            continue
        entry = wanted.setdefault((record["model"], record["precision"]),
                                  {"checks": [], "units": details["units"], "needed": 0, "exact": True,
                                   "samples": details.get("samples"), "never": []})
        if not exact and needed <= details["units"]:  # enough units were there: the losses seen keep it below
            entry["never"].append(record["check"])
            continue
        entry["checks"].append(record["check"])
        if needed > entry["needed"] or (needed == entry["needed"] and not exact):
            entry["needed"], entry["exact"] = needed, exact
    lines = []
    for (model, precision), entry in wanted.items():
        if entry["never"]:
            lines.append(f"{model} {precision} ({', '.join(entry['never'])}): {entry['units']} units; at the "
                         "decisions kept here no count establishes it: fewer lost decisions would, not more units")
        if not entry["checks"]:
            continue
        per_unit = entry["samples"] / entry["units"] if isinstance(entry["samples"], int) else 1
        samples = math.ceil(entry["needed"] * per_unit)
        amount = f"about {entry['needed']}" if entry["exact"] else f"at least {entry['needed']}"
        lines.append(f"{model} {precision} ({', '.join(entry['checks'])}): {entry['units']} units; establishing "
                     f"takes {amount}: {_establishing_command(results, model, precision, samples)}")
    for record in results["records"]:  # an audit the host's noise left open: more runs on this host would not settle it
        noise = (record.get("details") or {}).get("host_noise")
        if record["kind"] == "audit" and verdict(record) == NOT_ESTABLISHED and isinstance(noise, str) and noise:
            lines.append(f"{record['model']} {record['precision']} {record.get('scenario') or ''} {record['check']}: "
                         f"{noise}; a quieter host would settle it")
    return lines


# ----- how the figures were obtained (details "timing" and "timing_model") -----------------------------------------

def _distinct(values) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def timing_label(record: dict, results: dict) -> str:
    """The checks table's mark of a figure: ``measured`` or ``simulated``; the whole provenance (chip, calibration)
    when the run holds simulated figures of more than one timing model; empty when the record does not say."""
    text = provenance(record)
    if not text:
        return ""
    timing = text.partition(":")[0]
    if timing == "simulated" and len(_distinct(provenance(r) for r in results["records"]
                                               if provenance(r).startswith("simulated"))) > 1:
        return text
    return timing


def timing_summary(results: dict) -> str:
    """How the run's figures were obtained, for the run summary: each distinct provenance of its records (``simulated:
    C600 timing model, calibration 1a2b3c4d5e6f``, ``measured``); the hardware's ``timing`` when no record says; empty
    for older results files."""
    return "; ".join(_distinct(provenance(r) for r in results["records"])) or str(results["hardware"].get("timing") or "")


def simulated_chips(results: dict) -> list[tuple[str, str]]:
    """(chip, description) of each chip whose timing model gave simulated figures of the run."""
    chips = {}
    for record in results["records"]:
        model = timing_model_of(record) if provenance(record).startswith("simulated") else None
        if model and model.get("chip"):
            chips.setdefault(str(model["chip"]).upper(), str(model.get("chip_description") or ""))
    return list(chips.items())


def _has_timing(results: dict) -> bool:
    return any(provenance(r) for r in results["records"])


def check_headers(results: dict) -> tuple[str, ...]:
    """TABLE_HEADERS, with the Timing column before the verdict when some record says how it was obtained."""
    return (*TABLE_HEADERS[:-1], TIMING_HEADER, TABLE_HEADERS[-1]) if _has_timing(results) else TABLE_HEADERS


def check_rows(results: dict) -> list[tuple]:
    with_timing = _has_timing(results)
    rows = []
    for r in results["records"]:
        row = (r["model"], r["precision"], r.get("scenario") or "", r["check"], _value_text(r),
               f"{r['op']} {fmt(r.get('target'))}", r.get("units", ""))
        shown = check_verdict_text(r)
        rows.append((*row, timing_label(r, results), shown) if with_timing else (*row, shown))
    return rows


def check_verdict_text(record: dict) -> str:
    """:func:`verdict`, with why a failing figure of measured hardware is the host's (``details.host_bound``)."""
    shown = verdict(record)
    hosted = (record.get("details") or {}).get("host_bound")
    return f"{shown} (host-bound: {hosted})" if hosted and shown == "FAIL" else shown


def outcome_counts(results: dict) -> str:
    counts: dict[str, int] = {}
    for test in results["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "no tests"


def failed_tests(results: dict) -> list[dict]:
    return [t for t in results["tests"] if t["outcome"] in ("failed", "error")]


def _commit(results: dict) -> str:
    git = results["git"]
    if not git.get("commit"):
        return "unknown"
    return git["commit"][:12] + (" (uncommitted changes)" if git.get("dirty") else "")


def check_counts(results: dict) -> dict[str, int]:
    """Gated checks by verdict (``PASS``, ``PASS*``, ``FAIL``, ``XFAIL``: waived by a known failure) and ``info``."""
    counts = dict.fromkeys((*VERDICT_ORDER, "info"), 0)
    for record in results["records"]:
        v = verdict(record)
        counts["info" if "(info)" in v else v] += 1
    return counts


def _role(results: dict) -> str:
    """Whether the run was the release gate: its profile, with the profile's own sample counts."""
    settings = results["settings"]
    if settings["profile"] == RELEASE_PROFILE and settings.get("samples"):
        return "not the release gate: --samples replaced its counts"
    return profile_role(settings["profile"])


def _checks_summary(results: dict) -> str:
    c = check_counts(results)
    gated = c["PASS"] + c["PASS*"] + c["FAIL"] + c["XFAIL"]
    parts = [f"{c['PASS'] + c['PASS*']} passed ({c['PASS']} established"
             + (f", {c['PASS*']} not established)" if c["PASS*"] else ")"),
             f"{c['FAIL']} failed"]
    if c["XFAIL"]:
        parts.append(f"{c['XFAIL']} waived")
    return f"{gated} gated: {', '.join(parts)}; {c['info']} informational"


def _summary_pairs(results: dict) -> list[tuple[str, str]]:
    settings = results["settings"]
    hardware = results["hardware"]
    counts = check_counts(results)
    problems = [f"{n} {what}" for n, what in ((counts["FAIL"], "gate(s) failed"),
                                               (len(failed_tests(results)), "test(s) failed"),
                                               (len(results["regressions"]), "regression(s)")) if n]
    selection = results["settings"].get("selection") or {}
    if results.get("interrupted"):
        problems.append("interrupted" + (f": {not_run} of {selection['selected']} selected tests not run"
                                         if (not_run := tests_not_run(results)) else ""))
    pairs = [
        ("verdict", verdict_text(results) + (f" ({', '.join(problems)})" if problems else "")),
        ("hardware", f"{hardware['name']}: {hardware.get('description', '')}"),
    ]
    pairs += [("device", f"simulated {chip}" + (f": {description}" if description else ""))
              for chip, description in simulated_chips(results)]
    timing = timing_summary(results)
    if timing:
        pairs.append(("performance figures", timing))
    judged = judged_by_model(results)
    given = [m for m in settings["models"] if m not in judged and any(
        m in (settings.get(key) or {}) for key in ("checkpoints", "datasets", "calibrations"))]
    yours = [*judged, *given]  # an interrupted run may not have judged a model it was given data for
    pairs += [
        ("profile", f"{settings['profile']} ({_role(results)}), models "
                    f"{', '.join(settings['models'])}"),
        ("judged", "the suite's seeded weights and synthetic samples" if not yours else
         f"your checkpoint or data for {', '.join(yours)}" + (" (see What was judged)" if judged else "")
         + ("; the others: seeded weights" if set(settings["models"]) - set(yours) else "")),
        ("commit", _commit(results)),
        ("tests", outcome_counts(results)),
        *([("selection", selection_text(selection))] if selection_text(selection) else []),
        ("checks", _checks_summary(results)),
    ]
    if counts["XFAIL"]:
        reasons = len(known_failure_groups(results))
        pairs.append(("waived gates", f"{counts['XFAIL']} (known failures, {reasons} reason{'s' * (reasons != 1)}; "
                                      f"listed under Known failures)"))
    pairs.append(("created", f"{results['created']}, exit status {results['exit_status']}"))
    if settings.get("shard"):
        pairs.append(("shard", settings["shard"]))
    if results.get("merged_from"):
        pairs.append(("merged from", ", ".join(f"{m['path']} (shard {m.get('shard') or '-'})" for m in results["merged_from"])))
    hosts = shard_arithmetics(results)
    if len(hosts) > 1:
        pairs.append(("arithmetic", f"the shards ran on {len(hosts)} hosts whose products round in other orders ("
                                    + "; ".join(f"{text}: shard {', '.join(shards)}" for text, shards in hosts.items())
                                    + "): the last bits of a figure depend on the host that took its shard"))
    if results.get("missing_shards"):
        pairs.append(("missing shards", ", ".join(results["missing_shards"]) + " (verdict FAIL: the run is incomplete)"))
    if settings.get("baseline"):
        pairs.append(("baseline", settings["baseline"]))
    return pairs


def arithmetic_text(arithmetic: dict | None) -> str:
    """``machine.arithmetic`` in a few words: each BLAS library's name, version and CPU kernels, then numpy's version
    and its SIMD targets."""
    if not isinstance(arithmetic, dict):
        return "not recorded"
    blas = ", ".join(" ".join(str(v) for v in value if v) for value in (arithmetic.get("blas") or {}).values())
    simd = "+".join(arithmetic.get("numpy_simd") or [])
    return f"{blas or 'no BLAS'}, numpy {arithmetic.get('numpy', '?')}" + (f" ({simd})" if simd else "")


def shard_arithmetics(results: dict) -> dict[str, list[str]]:
    """For a merged record, each distinct host arithmetic its shards computed with, and those shards."""
    hosts: dict[str, list[str]] = {}
    for source in results.get("merged_from") or []:
        machine = source.get("machine") or {}
        hosts.setdefault(arithmetic_text(machine.get("arithmetic")), []).append(source.get("shard") or "-")
    return hosts


# ----- known failures, grouped by reason ----------------------------------------------------------------------------

def known_failure_groups(results: dict) -> list[dict]:
    """Tests run under a known-failure entry, one group per reason: ``{"reason", "bucket", "sources", "tests":
    [(test id, outcome, waived checks)]}``. Whatever else an entry says (e.g. the checks it names) is kept in ``extra``."""
    groups: dict[str, dict] = {}
    waived = {}
    for record in results["records"]:
        if verdict(record) == "XFAIL":
            waived.setdefault(record["test_id"], []).append(record["check"])
    for test in results["tests"]:
        entry = test.get("xfail")
        if not entry:
            continue
        group = groups.setdefault(entry["reason"], {"reason": entry["reason"], "bucket": entry.get("bucket", ""),
                                                    "sources": [], "tests": []})
        if entry.get("source") and entry["source"] not in group["sources"]:
            group["sources"].append(entry["source"])
        named = entry.get("checks")
        checks = waived.get(test["id"]) or (list(named) if isinstance(named, list) else [])
        group["tests"].append((test["id"], test["outcome"], checks))
    return list(groups.values())


def _short_id(test_id: str) -> str:
    return test_id.split("::")[-1]


# ----- formats ------------------------------------------------------------------------------------------------------

def _value_text(record: dict) -> str:
    """The value, with its 95% interval when the record has one."""
    ci = (record.get("details") or {}).get("ci95")
    text = fmt(record.get("value"))
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci):
        text += f" [{fmt(ci[0])}, {fmt(ci[1])}]"
    return text


def verdict_text(results: dict) -> str:
    """The run's verdict as every report shows it: a PASS of a run that ``-k`` or ``-m`` narrowed is partial, naming
    how many tests it left out (``settings.selection``)."""
    deselected = (results["settings"].get("selection") or {}).get("deselected")
    if results["verdict"] == "PASS" and deselected:
        return f"PASS (partial: {deselected} test{'s' * (deselected != 1)} deselected)"
    return results["verdict"]


def selection_text(selection: dict) -> str:
    """``-k``, ``-m`` and what they left out, in words; empty for a run they left nothing out of (a ``-m 'not slow'``
    of the configuration that deselects nothing is not worth a line)."""
    if not selection.get("deselected"):
        return ""
    parts = [f"-{flag} {selection[key]!r}" for flag, key in (("k", "keyword"), ("m", "markers")) if selection.get(key)]
    of = f" of {selection['selected'] + selection['deselected']}" if selection.get("selected") is not None else ""
    return ", ".join([*parts, f"{selection['deselected']}{of} tests deselected"])


def tests_not_run(results: dict) -> int:
    """How many of the tests the run set out to run have no result (an interrupted run's)."""
    selected = (results["settings"].get("selection") or {}).get("selected")
    return max(selected - len(results["tests"]), 0) if isinstance(selected, int) else 0


def verdict_line(results: dict) -> str:
    """The run's verdict in one line: what the terminal prints last (one line, whatever the width, for a CI log's
    search)."""
    return (f"conformance {verdict_text(results)}: hardware={results['hardware']['name']}, "
            f"profile={results['settings']['profile']} ({_role(results)}), "
            f"{outcome_counts(results)}; {_checks_summary(results)}")


def skipped_tests(results: dict) -> list[tuple[str, list[str]]]:
    """The skipped tests grouped by their reason: (reason, [test ids]), in the run's order."""
    groups: dict[str, list[str]] = {}
    for test in results["tests"]:
        if test["outcome"] == "skipped":
            groups.setdefault(test["message"] or "(no reason given)", []).append(test["id"])
    return list(groups.items())
