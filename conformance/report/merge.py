"""Merge several results.json files (the shards of one run, from several machines) into one results record.

Only the shards of one run make a merged record: files are refused (:class:`MergeError`, exit 4 of ``ipu-conformance
report``) when they come from different settings (hardware, profile, models, precisions, simulated device, clock,
sample counts, the user's checkpoints, data and calibration data) or different commits, when two of them hold the
same test (overlapping shards), and when the set of shards is incomplete (``1/2`` without ``2/2``; also a single
shard's file on its own). The merged verdict and exit status are recomputed from the merged tests, records and
regressions (:func:`conformance.report.record.judge`).
"""

from __future__ import annotations

import json

from conformance.report.collect import assign_ids
from conformance.report.judged import judged_by_model
from conformance.report.record import EXIT_NO_VERDICT, judge, recorded_settings
from conformance.report.shard import parse_shard

# settings that must agree (Recorded.shards of each results.json key); shard, xfail_file and baseline legitimately
# differ. Paths of the user's checkpoints and data may differ between machines: the models given them must agree, and
# their contents (sha256 in the records) where two shards both judged the model.
SAME_SETTINGS = tuple(key for key, meta in recorded_settings().items() if meta.shards == "same")
SAME_MODELS = tuple(key for key, meta in recorded_settings().items() if meta.shards == "models")
JUDGED_PARTS = ("checkpoint", "dataset", "fp8_calibration")


class MergeError(ValueError):
    pass


def _fingerprint(part) -> str:
    """What identifies a checkpoint or data set the records say was judged: its sha256 (or the synthetic seed)."""
    if isinstance(part, dict):
        keep = {k: part[k] for k in ("sha256", "seeded_weights", "format", "seed", "rows") if k in part}
        return json.dumps(keep or part, sort_keys=True, default=str)
    return json.dumps(part, default=str)


def check_same_run(named: list[tuple[str, dict]]) -> None:
    """A MergeError naming the first file whose settings, commit or judged inputs differ from the first file's."""
    first_path, first = named[0]
    judged_first = judged_by_model(first)
    for path, data in named[1:]:
        for key in SAME_SETTINGS:
            mine, theirs = data["settings"].get(key), first["settings"].get(key)
            if mine != theirs:
                raise MergeError(f"{path}: settings.{key} is {mine!r} but {first_path} has {theirs!r}; only shards of "
                                 f"one run can be merged")
        for key in SAME_MODELS:
            mine, theirs = sorted(data["settings"].get(key) or {}), sorted(first["settings"].get(key) or {})
            if mine != theirs:
                raise MergeError(f"{path}: settings.{key} names models {mine} but {first_path} names {theirs}; only "
                                 f"shards of one run can be merged")
        if data["git"].get("commit") != first["git"].get("commit") or data["git"].get("dirty") != first["git"].get("dirty"):
            raise MergeError(f"{path}: commit {data['git'].get('commit')} (dirty={data['git'].get('dirty')}) but "
                             f"{first_path} has {first['git'].get('commit')} (dirty={first['git'].get('dirty')}); "
                             f"results of different code cannot be merged")
        for model, judged in judged_by_model(data).items():
            other = judged_first.get(model)
            if other is None:
                continue
            for part in JUDGED_PARTS:
                if part in judged and part in other and _fingerprint(judged[part]) != _fingerprint(other[part]):
                    raise MergeError(f"{path}: {model} was judged with another {part.replace('_', ' ')} than in "
                                     f"{first_path} ({_fingerprint(judged[part])} vs {_fingerprint(other[part])}); "
                                     f"only shards of one run can be merged")


def merge(named: list[tuple[str, dict]]) -> dict:
    """Merge ``[(path, results), ...]``; a single file that is not a shard is returned unchanged."""
    if not named:
        raise MergeError("no results files to merge")
    check_same_run(named)
    owner: dict[str, str] = {}
    for path, data in named:
        for test in data["tests"]:
            if test["id"] in owner:
                raise MergeError(f"{path}: test {test['id']} is also in {owner[test['id']]}; the files overlap")
            owner[test["id"]] = path
    missing = missing_shards(named)
    if missing:
        given = ", ".join(f"{path} (shard {data['settings'].get('shard')})" for path, data in named)
        raise MergeError(f"incomplete set of shards: shard(s) {', '.join(missing)} missing; given {given}; merge the "
                         f"results.json of every shard of the run")
    if len(named) == 1:
        return named[0][1]
    first = named[0][1]

    merged = dict(first)
    merged["settings"] = {**first["settings"], "shard": None, "baseline": None}
    merged["tests"] = sorted((t for _, d in named for t in d["tests"]), key=lambda t: t["id"])
    selections = [d["settings"].get("selection") for _, d in named]
    if all(selections):  # every shard's share of the selection, added up (each shard applies -k and -m alike)
        counts = [s.get("selected") for s in selections]
        merged["settings"]["selection"] = {
            **selections[0], "selected": sum(counts) if all(isinstance(c, int) for c in counts) else None,
            "deselected": sum(s["deselected"] for s in selections), "skipped": sum(s["skipped"] for s in selections)}
    merged["records"] = assign_ids([dict(r) for _, d in named for r in d["records"]])
    merged["stale_xfails"] = _stale_in_all(named)
    merged["regressions"] = [r for _, d in named for r in d["regressions"]]
    merged["interrupted"] = any(d["interrupted"] for _, d in named)
    failures = [d["exit_status"] for _, d in named if d["exit_status"] not in (0, EXIT_NO_VERDICT)]
    judgement = judge(exit_status=max(failures, default=0), interrupted=merged["interrupted"], tests=merged["tests"],
                      records=merged["records"], regressions=merged["regressions"])
    merged["verdict"], merged["exit_status"] = judgement.verdict, judgement.exit_status
    merged["created"] = max(d["created"] for _, d in named)
    files = {}
    for _, d in named:
        files.update(d["plots"].get("files", {}))
    statuses = {d["plots"]["status"] for _, d in named}
    status = "written" if "written" in statuses else ("skipped" if "skipped" in statuses else "none")
    reasons = sorted({d["plots"]["reason"] for _, d in named if d["plots"]["reason"]})
    merged["plots"] = {"status": status, "reason": "; ".join(reasons), "files": dict(sorted(files.items()))}
    merged["merged_from"] = [{"path": path, "shard": d["settings"].get("shard"), "created": d["created"],
                              "machine": d["machine"]} for path, d in named]
    merged.pop("missing_shards", None)
    return merged


def _stale_in_all(named) -> list[dict]:
    """An xfail entry is stale for the merged run only if every shard found it stale."""
    lists = [{e["test_id"]: e for e in d["stale_xfails"]} for _, d in named]
    common = set(lists[0]).intersection(*lists[1:])
    return [lists[0][k] for k in sorted(common)]


def missing_shards(named) -> list[str]:
    """Shards ``i/n`` not among the files, when they are shards of an n-way split (a merged run must be complete); a
    MergeError for files that are not parts of one split (mixed counts, a shard with a whole run)."""
    shards = [d["settings"].get("shard") for _, d in named]
    if not any(shards):
        return []
    parsed = [parse_shard(s) for s in shards if s]
    count = parsed[0].count
    if any(p.count != count for p in parsed) or len(parsed) != len(shards):
        raise MergeError(f"shards {[s or 'none' for s in shards]} are not parts of one split")
    have = {p.index for p in parsed}
    return [f"{i}/{count}" for i in range(1, count + 1) if i not in have]
