"""Merge several results.json files (the shards of one run, from several machines) into one results record.

Files are refused when they come from different settings (hardware, profile, models) or different commits, or when
two of them hold the same test (overlapping shards).
"""

from __future__ import annotations

from conformance.report.collect import assign_ids
from conformance.report.shard import parse_shard

# settings that must agree; shard, xfail_file and baseline legitimately differ
SAME_SETTINGS = ("hardware", "profile", "models")


class MergeError(ValueError):
    pass


def merge(named: list[tuple[str, dict]]) -> dict:
    """Merge ``[(path, results), ...]``; a single file is returned unchanged."""
    if not named:
        raise MergeError("no results files to merge")
    if len(named) == 1:
        return named[0][1]
    first_path, first = named[0]
    for path, data in named[1:]:
        for key in SAME_SETTINGS:
            if data["settings"][key] != first["settings"][key]:
                raise MergeError(f"{path}: settings.{key} is {data['settings'][key]!r} but {first_path} has "
                                 f"{first['settings'][key]!r}; only shards of one run can be merged")
        if data["git"].get("commit") != first["git"].get("commit") or data["git"].get("dirty") != first["git"].get("dirty"):
            raise MergeError(f"{path}: commit {data['git'].get('commit')} (dirty={data['git'].get('dirty')}) but "
                             f"{first_path} has {first['git'].get('commit')} (dirty={first['git'].get('dirty')}); "
                             f"results of different code cannot be merged")
    owner: dict[str, str] = {}
    for path, data in named:
        for test in data["tests"]:
            if test["id"] in owner:
                raise MergeError(f"{path}: test {test['id']} is also in {owner[test['id']]}; the files overlap")
            owner[test["id"]] = path

    merged = dict(first)
    merged["settings"] = {**first["settings"], "shard": None, "baseline": None}
    merged["tests"] = sorted((t for _, d in named for t in d["tests"]), key=lambda t: t["id"])
    merged["records"] = assign_ids([dict(r) for _, d in named for r in d["records"]])
    merged["stale_xfails"] = _stale_in_all(named)
    merged["regressions"] = [r for _, d in named for r in d["regressions"]]
    merged["exit_status"] = max((d["exit_status"] for _, d in named), key=lambda s: (s != 0, s))
    merged["interrupted"] = any(d["interrupted"] for _, d in named)
    merged["verdict"] = "PASS" if all(d["verdict"] == "PASS" for _, d in named) else "FAIL"
    merged["created"] = max(d["created"] for _, d in named)
    files = {}
    for _, d in named:
        files.update(d["plots"].get("files", {}))
    statuses = {d["plots"]["status"] for _, d in named}
    status = "written" if "written" in statuses else ("skipped" if "skipped" in statuses else "none")
    reasons = sorted({d["plots"]["reason"] for _, d in named if d["plots"]["reason"]})
    merged["plots"] = {"status": status, "reason": "; ".join(reasons), "files": dict(sorted(files.items()))}
    merged["merged_from"] = [{"path": path, "shard": d["settings"].get("shard"), "created": d["created"]} for path, d in named]
    missing = missing_shards(named)
    if missing:
        merged["verdict"] = "FAIL"
        merged["missing_shards"] = missing
    return merged


def _stale_in_all(named) -> list[dict]:
    """An xfail entry is stale for the merged run only if every shard found it stale."""
    lists = [{e["test_id"]: e for e in d["stale_xfails"]} for _, d in named]
    common = set(lists[0]).intersection(*lists[1:])
    return [lists[0][k] for k in sorted(common)]


def missing_shards(named) -> list[str]:
    """Shards ``i/n`` not among the files, when they are shards of an n-way split (a merged run must be complete)."""
    shards = [d["settings"].get("shard") for _, d in named]
    if not any(shards):
        return []
    parsed = [parse_shard(s) for s in shards if s]
    count = parsed[0].count
    if any(p.count != count for p in parsed) or len(parsed) != len(shards):
        raise MergeError(f"shards {[s or 'none' for s in shards]} are not parts of one split")
    have = {p.index for p in parsed}
    return [f"{i}/{count}" for i in range(1, count + 1) if i not in have]
