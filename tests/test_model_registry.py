"""The models' registry: specs found through the entry-point group ``ipu_conformance.models``, the suite's per-model
tables read from them, and a model, precision or scenario without its performance targets refused before any test."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import models
from conformance.accuracy import metrics
from conformance.hardware import get_backend
from conformance.targets import accuracy as accuracy_targets
from conformance.targets import performance
from models.spec import SPEC_ENTRY_POINT_GROUP, ModelSpec

ROOT = Path(__file__).resolve().parents[1]


def test_the_six_models_register_through_the_entry_point_group():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][SPEC_ENTRY_POINT_GROUP]
    assert tuple(sorted(declared)) == models.MODEL_NAMES
    assert models.MODEL_NAMES == ("albert", "bert-base", "conformer", "resnet50", "roformer", "widedeep")
    for name, value in declared.items():
        spec = models.model_spec(name)
        assert isinstance(spec, ModelSpec) and spec.name == name
        assert value == f"{spec.module}:SPEC"
        assert models.model_module(name).__name__ == spec.module


def test_aliases_come_from_the_specs():
    assert models.canonical_name("wide&deep") == "widedeep"
    assert models.canonical_name("bert") == "bert-base"
    assert models.canonical_name("resnet50-v1.5") == "resnet50"
    with pytest.raises(ValueError, match="unknown model 'mlp'; expected one of: albert, bert-base"):
        models.canonical_name("mlp")


def test_the_suites_tables_are_the_specs():
    for name, spec in models.model_specs().items():
        assert accuracy_targets.TASK_METRICS[name] == spec.task_metrics
        assert accuracy_targets.LABEL_METRICS[name] == spec.label_metrics
        assert metrics.PRIMARY_OUTPUT[name] == spec.primary_output


def test_a_spec_is_checked_when_declared():
    with pytest.raises(ValueError, match="task_metrics .* and task_scorer None must be given together"):
        ModelSpec(name="m", module="m", model_class="M", primary_output="y", task_metrics=("a",))
    with pytest.raises(ValueError, match="label_metrics .* without a dataset_format"):
        ModelSpec(name="m", module="m", model_class="M", primary_output="y", label_metrics=("a",))
    spec = ModelSpec(name="m", module="m", model_class="M", primary_output="y", tables="/x")
    assert spec.table("accuracy") == Path("/x/accuracy.toml")
    with pytest.raises(ValueError, match="unknown table 'gates'"):
        spec.table("gates")


def test_an_entry_point_that_is_not_a_spec_or_misnamed_is_refused(monkeypatch):
    monkeypatch.setitem(models._ENTRY_POINTS, "other", metadata.EntryPoint("other", "models.widedeep:SPEC",
                                                                          SPEC_ENTRY_POINT_GROUP))
    monkeypatch.setitem(models._ENTRY_POINTS, "broken", metadata.EntryPoint("broken", "models.widedeep:WideDeep",
                                                                           SPEC_ENTRY_POINT_GROUP))
    monkeypatch.setitem(models._ENTRY_POINTS, "absent", metadata.EntryPoint("absent", "no_such_module_x:SPEC",
                                                                           SPEC_ENTRY_POINT_GROUP))
    models._spec.cache_clear()
    try:
        with pytest.raises(models.ModelRegistryError, match="its spec is named 'widedeep'"):
            models._spec("other")
        with pytest.raises(models.ModelRegistryError, match="expected a models.spec.ModelSpec, got type"):
            models._spec("broken")
        with pytest.raises(models.ModelRegistryError, match="failed to load: ModuleNotFoundError"):
            models._spec("absent")
    finally:
        models._spec.cache_clear()


def test_task_metrics_are_scored_by_the_scorer_the_spec_names():
    rng = np.random.default_rng(0)
    ref = {"logits": rng.normal(size=(16, 10))}
    hw = {"logits": ref["logits"] + rng.normal(scale=0.5, size=(16, 10))}
    through_spec = metrics.task_metrics("resnet50", ref, hw, {})
    direct = {k: m.value for k, m in metrics.classification_agreement(ref, hw, {}).items()}
    assert through_spec == direct
    assert through_spec["top1_agreement"] == np.mean(ref["logits"].argmax(1) == hw["logits"].argmax(1))
    assert metrics.task_metrics("conformer", {"memory": ref["logits"]}, {"memory": hw["logits"]}, {}) == {}


def _without(text: str, table: str, scenario: str | None = None) -> str:
    """A performance.toml's text with a table removed, or one scenario line of it."""
    head = f"[{table}]\n"
    start = text.index(head)
    end = text.index("\n\n", start)
    if scenario is None:
        return text[:start] + text[end + 2:]
    block = re.sub(rf"^{scenario} = .*\n", "", text[start:end] + "\n", flags=re.M)
    return text[:start] + block.rstrip("\n") + text[end:]


def test_every_selected_model_has_the_targets_its_hardware_times(edited_model_table):
    ipu = get_backend("ipu")
    performance.check_complete(ipu, models.MODEL_NAMES)  # the suite's own tables are complete
    text = models.model_spec("widedeep").table("performance").read_text()
    edited_model_table("widedeep", "performance", text, _without(text, "targets.widedeep.ipu.fp8"))
    with pytest.raises(performance.PerformanceTargetsError,
                       match=r"no performance targets for \[targets\.widedeep\.ipu\.fp8\]: the 'ipu' hardware"):
        performance.check_complete(ipu, models.MODEL_NAMES)
    # not selected, or the precision not run: nothing is missing
    performance.check_complete(ipu, ("resnet50",))
    performance.check_complete(ipu, ("widedeep",), precisions=("fp16",))
    text = models.model_spec("conformer").table("performance").read_text()
    edited_model_table("conformer", "performance", text, _without(text, "targets.conformer.ipu.fp16", "MultiStream"))
    with pytest.raises(performance.PerformanceTargetsError,
                       match=r"\[targets\.conformer\.ipu\.fp16\] MultiStream"):
        performance.check_complete(ipu, ("conformer",))
