"""``--shard i/n`` selection and merging the shards' results.json files into one table."""

from __future__ import annotations

import copy
import random
import re

import pytest

from conformance.report import merge, shard
from conformance.report import record as results_record
from conformance.report.render import summary
from tests.sample_results import sample_results


NODE_IDS = [f"conformance/test_{kind}.py::test_{kind}[{model}-{precision}]"
            for kind in ("accuracy", "performance") for model in ("albert", "bert-base", "resnet50", "widedeep")
            for precision in ("fp16", "fp8")] + ["conformance/test_reference.py::test_reference[bert-base]"]


class Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


@pytest.mark.parametrize("count", [1, 2, 3, 5, len(NODE_IDS), len(NODE_IDS) + 3])
def test_shards_cover_every_test_exactly_once(count):
    items = [Item(n) for n in NODE_IDS]
    seen = []
    for index in range(1, count + 1):
        selected, deselected = shard.split(items, shard.Shard(index, count))
        assert len(selected) + len(deselected) == len(items)
        seen += [i.nodeid for i in selected]
        assert len(selected) in (len(items) // count, -(-len(items) // count)), "shares are balanced"
    assert sorted(seen) == sorted(NODE_IDS)


def test_shard_selection_does_not_depend_on_collection_order():
    shuffled = NODE_IDS[:]
    random.Random(3).shuffle(shuffled)
    for index in (1, 2, 3):
        a, _ = shard.split([Item(n) for n in NODE_IDS], shard.Shard(index, 3))
        b, _ = shard.split([Item(n) for n in shuffled], shard.Shard(index, 3))
        assert sorted(i.nodeid for i in a) == sorted(i.nodeid for i in b)


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "1", "", "1/2/3", "١/٢", "１/２"])
def test_bad_shard_is_refused(text):
    with pytest.raises(ValueError, match="--shard"):
        shard.parse_shard(text)


def split_sample(count: int) -> list[tuple[str, dict]]:
    """The sample run cut into ``count`` shard files the way ``--shard`` would have produced them."""
    full = sample_results()
    owner = shard.shard_of([t["id"] for t in full["tests"]], count)
    parts = []
    for index in range(1, count + 1):
        part = copy.deepcopy(full)
        part["settings"]["shard"] = f"{index}/{count}"
        part["tests"] = [t for t in full["tests"] if owner[t["id"]] == index]
        part["records"] = [r for r in full["records"] if owner[r["test_id"]] == index]
        part["regressions"] = [r for r in full["regressions"] if owner[r["test_id"]] == index]
        parts.append((f"shard{index}.json", part))
    return parts


def test_merged_shards_equal_the_whole_run():
    full = sample_results()
    merged = merge.merge(split_sample(3))
    assert merged["tests"] == full["tests"]
    assert merged["records"] == full["records"]
    assert merged["regressions"] == full["regressions"]
    assert merged["verdict"] == "FAIL" and "missing_shards" not in merged
    assert [m["shard"] for m in merged["merged_from"]] == ["1/3", "2/3", "3/3"]


def test_a_merged_record_says_where_each_shard_ran():
    """Shards run on other kinds of CPU compute with other arithmetic: the merged record keeps each one's machine."""
    parts = split_sample(2)
    parts[1][1]["machine"] = {**parts[1][1]["machine"], "hostname": "runner-b",
                              "arithmetic": {"blas": {"libopenblas.so": ["openblas", "0.3.31", "SkylakeX"]},
                                             "numpy": "2.4.6", "numpy_simd": ["X86_V2", "X86_V3", "X86_V4"]}}
    merged = merge.merge(parts)
    assert [m["machine"] for m in merged["merged_from"]] == [parts[0][1]["machine"], parts[1][1]["machine"]]
    assert merged["merged_from"][1]["machine"]["arithmetic"]["blas"]["libopenblas.so"][2] == "SkylakeX"
    results_record.validate(merged)
    pairs = dict(summary._summary_pairs(merged))
    assert pairs["arithmetic"].startswith("the shards ran on 2 hosts whose products round in other orders (")
    assert "openblas 0.3.31 SkylakeX, numpy 2.4.6 (X86_V2+X86_V3+X86_V4): shard 2/2" in pairs["arithmetic"]
    assert "shard 1/2" in pairs["arithmetic"]
    assert "arithmetic" not in dict(summary._summary_pairs(merge.merge(split_sample(2))))  # one host: nothing to say


def test_incomplete_split_is_refused_naming_the_missing_shards():
    parts = split_sample(3)
    with pytest.raises(merge.MergeError, match=r"incomplete set of shards: shard\(s\) 3/3 missing; given shard1.json "
                                               r"\(shard 1/3\), shard2.json \(shard 2/3\)"):
        merge.merge(parts[:2])
    with pytest.raises(merge.MergeError, match=r"shard\(s\) 2/3, 3/3 missing; given shard1.json"):
        merge.merge(parts[:1])  # one shard alone is not the run
    whole = sample_results()
    assert merge.merge([("whole.json", whole)]) is whole  # a run that was not split is returned as it is
    one_of_one = copy.deepcopy(whole)
    one_of_one["settings"]["shard"] = "1/1"
    assert merge.merge([("one.json", one_of_one)]) is one_of_one


def test_merged_verdict_is_recomputed_from_the_shards():
    parts = split_sample(2)
    for _, part in parts:  # what the shards say is not taken: the merged tests and records decide
        part["verdict"], part["exit_status"] = "PASS", 0
    merged = merge.merge(parts)
    assert (merged["verdict"], merged["exit_status"]) == ("FAIL", 1)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["settings"].update(profile="full"), "settings.profile"),
        (lambda d: d["settings"].update(hardware="cpu"), "settings.hardware"),
        (lambda d: d["git"].update(commit="f" * 40), "results of different code"),
        (lambda d: d["settings"].update(precisions=["fp16"]), "settings.precisions is ['fp16'] but shard1.json has None"),
        (lambda d: d["settings"].update(device="bow"), "settings.device is 'bow'"),
        (lambda d: d["settings"].update(samples={"*": 8}), "settings.samples is {'*': 8}"),
        (lambda d: d["settings"].update(checkpoints={"bert-base": "/ckpt"}), "settings.checkpoints names models "
                                                                              "['bert-base'] but shard1.json names []"),
        (lambda d: d["settings"].update(datasets={"resnet50": "/images"}), "settings.datasets names models"),
    ],
    ids=["profile", "hardware", "commit", "precisions", "device", "samples", "checkpoints", "datasets"],
)
def test_merge_refuses_other_settings_or_commits(change, message):
    parts = split_sample(2)
    change(parts[1][1])
    with pytest.raises(merge.MergeError, match=re.escape(message)):
        merge.merge(parts)


def test_merge_refuses_overlapping_files():
    parts = split_sample(2)
    with pytest.raises(merge.MergeError, match="the files overlap"):
        merge.merge([parts[0], ("copy.json", parts[0][1])])
