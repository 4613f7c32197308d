"""A check's verdict and a figure as the reports write them."""

from __future__ import annotations


def fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:.6g}"
    return str(value)


def verdict(record: dict) -> str:
    """PASS/FAIL of one check; ``PASS*`` when it passes on its point estimate but its 95% interval does not clear the
    target (not established); XFAIL when its test is a known failure; informational checks marked (info)."""
    if not record.get("gating", True):
        return "PASS (info)" if record["passed"] else "BELOW (info)"
    if record["passed"]:
        return NOT_ESTABLISHED if record.get("established") is False else "PASS"
    return "XFAIL" if record.get("outcome") == "xfailed" else "FAIL"


NOT_ESTABLISHED = "PASS*"
NOT_ESTABLISHED_NOTE = ("PASS*: passes on its point estimate, but the 95% confidence interval of the measurement "
                        "reaches below the target (PASS, not established): more samples would settle it.")
AUDIT_NOT_ESTABLISHED_NOTE = ("An audit's PASS*: its timing comparison is not settled on these runs: they are INVALID "
                              "only for the profile's short length, or the host's run-to-run spread is as large as the "
                              "audit's bound (host-bound; its check says by how much).")


def not_established_note(results: dict) -> str:
    """The legend of PASS* for a run with such checks ('' without): an audit's, where one is PASS*, said apart."""
    shown = [verdict(r) for r in results["records"]]
    if NOT_ESTABLISHED not in shown:
        return ""
    audits = any(r["kind"] == "audit" and v == NOT_ESTABLISHED for r, v in zip(results["records"], shown))
    return NOT_ESTABLISHED_NOTE + (" " + AUDIT_NOT_ESTABLISHED_NOTE if audits else "")


VERDICT_ORDER = ("PASS", "PASS*", "XFAIL", "FAIL")  # a cell shows the worst verdict of its checks
HOST_BOUND_NOTE = ("FAIL (host-bound): a measured figure missed its target where the device side alone met it, or the "
                   "host was oversubscribed: the host's share, not the device's; the checks say how much.")
