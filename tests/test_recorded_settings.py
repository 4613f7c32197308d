"""Which options results.json records, which of them the shards of one run must agree on and which ``report compare``
and ``--baseline`` weigh: each option names the key it is recorded as (``Option.recorded``), and that key's field of the
results schema says how it is kept (:class:`conformance.report.record.Recorded`). Merging and comparing read those
declarations, so a recorded option is kept, merged and compared without a list of keys to edit."""

from __future__ import annotations

import pytest

from conformance.hardware import get_backend
from conformance.report import compare, merge
from conformance.report import record as results_record
from conformance.settings import RunSettings
from conformance.settings.options import OPTIONS

RECORDED = results_record.recorded_settings()
# keys build writes from its own arguments (the run's shard, its known-failures file, its baseline)
WRITTEN_BY_BUILD = {"shard", "xfail_file", "baseline"}
# recorded facts that no option gives: the version of the target tables the run was judged with
NOT_AN_OPTION = {"tables"}


def test_every_option_says_whether_and_as_what_it_is_recorded():
    keys = {option.flag: option.recorded for option in OPTIONS}
    unknown = {flag: key for flag, key in keys.items()
               if key is not None and key not in results_record.Settings.model_fields}
    assert not unknown, f"options recorded under keys results.json does not have: {unknown}"
    assert len({k for k in keys.values() if k}) == len([k for k in keys.values() if k]), "two options, one key"


def test_every_recorded_setting_but_the_tables_comes_from_an_option():
    from_options = {option.recorded for option in OPTIONS if option.recorded}
    assert set(RECORDED) - from_options == NOT_AN_OPTION
    assert from_options - set(RECORDED) == WRITTEN_BY_BUILD


def test_a_run_records_every_recorded_option(tmp_path):
    settings = RunSettings(hardware="ipu", models=("bert-base",), profile="smoke", precisions=("fp16",),
                           report_dir=tmp_path, samples={"bert-base": 3}, checkpoints={"bert-base": tmp_path / "ckpt"})
    results = results_record.build(settings=settings, backend=settings.backend, profile=settings.profile_data,
                                   tests=[], records=[], exit_status=0)
    results_record.validate(results)
    assert {option.recorded for option in OPTIONS if option.recorded} <= set(results["settings"])
    written = results["settings"]
    assert (written["device"], written["samples"], written["checkpoints"]) == (
        "c600", {"bert-base": 3}, {"bert-base": str(tmp_path / "ckpt")})
    assert written["precisions"] == ["fp16"] and written["array"] == "numpy" and written["real_time_loadgen"] is False


def _run(**settings) -> dict:
    base = {"hardware": "ipu", "profile": "smoke", "models": ["bert-base"], "shard": "1/2", "xfail_file": None,
            "baseline": None, "precisions": ["fp16"], "device": "c600", "real_time_loadgen": False,
            "samples": {}, "checkpoints": {}, "datasets": {}, "calibrations": {}, "tables": "0" * 64, "array": "numpy"}
    return {"settings": {**base, **settings}, "git": {"commit": "abc", "dirty": False}, "tests": [], "records": [],
            "profile": {"samples": {"bert-base": 8}, "batch_size": {"bert-base": 4}}}


OTHER_VALUE = {"hardware": "cpu", "profile": "default", "models": ["resnet50"], "precisions": ["fp8"],
               "device": "bow", "real_time_loadgen": True, "samples": {"*": 2}, "tables": "1" * 64, "array": "torch:cpu",
               "checkpoints": {"resnet50": "x"}, "datasets": {"resnet50": "x"}, "calibrations": {"resnet50": "x"}}


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_shards_must_agree_on_what_their_fields_say(key):
    first, second = _run(), _run(shard="2/2", **{key: OTHER_VALUE[key]})
    if RECORDED[key].shards:
        with pytest.raises(merge.MergeError, match=f"settings.{key} "):
            merge.check_same_run([("a.json", first), ("b.json", second)])
    else:
        merge.check_same_run([("a.json", first), ("b.json", second)])


def test_shards_may_give_a_model_its_checkpoint_from_another_path():
    first = _run(checkpoints={"bert-base": "/a/ckpt"})
    merge.check_same_run([("a.json", first), ("b.json", _run(shard="2/2", checkpoints={"bert-base": "/b/ckpt"}))])


@pytest.mark.parametrize("key", sorted(k for k, meta in RECORDED.items() if meta.compare in ("figures", "selection")))
def test_a_run_wide_setting_is_compared_as_its_field_says(key):
    [found] = compare.differences(_run(), _run(**{key: OTHER_VALUE[key]}))
    assert found.setting == RECORDED[key].label and found.model is None
    assert found.changes_figures == (RECORDED[key].compare == "figures")


@pytest.mark.parametrize("key", sorted(k for k, meta in RECORDED.items() if meta.compare == "model"))
def test_a_per_model_setting_is_compared_per_model(key):
    value = {"*": 2} if key == "samples" else {"bert-base": "elsewhere"}
    [found] = compare.differences(_run(), _run(**{key: value}))
    assert (found.setting, found.model, found.changes_figures) == (RECORDED[key].label, "bert-base", True)


def test_a_setting_that_is_not_compared_is_not_a_difference():
    quiet = [k for k, meta in RECORDED.items() if not meta.compare and k != "hardware"]
    assert quiet == ["tables", "array"]
    assert compare.differences(_run(), _run(**{k: OTHER_VALUE[k] for k in quiet})) == []
    assert compare.refusal(_run(), _run(hardware="cpu")), "another hardware is refused, not compared"

