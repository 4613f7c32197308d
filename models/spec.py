"""What the suite needs to know of one model, declared beside the model's code and found through the entry-point
group ``ipu_conformance.models`` (the six built-in models register there too, in ``pyproject.toml``).

A model is a module (``ModelSpec.module``) with ``build_config(**overrides)``, ``load(checkpoint=None, seed=0,
allow_unused=False, **overrides)``, ``assemble(config, params)``, ``host_bytes(config, batch)`` and the shapes of its
parameters; its forward computes through the ``Ops`` contract (:mod:`models.ops`). The spec says the rest: which
output's tensor metrics are gated, its task metrics (the decisions, scored by ``task_scorer`` against the FP32
outputs) and label metrics, the data format ``--dataset`` reads for it, the ``model_type`` of its checkpoints, how a
shape-only copy is built for the timing model, and the files of its gates, targets, profiles' counts, FP8 settings
and audit exemptions (``tables``; the built-in models' are in ``models/tables/<model>/``). Callables the suite
provides (task scorers, data readers) are named as ``module:attribute`` strings so that this package imports nothing
of the suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SPEC_ENTRY_POINT_GROUP = "ipu_conformance.models"
TABLE_NAMES = ("accuracy", "performance", "profiles", "fp8", "audit")
# The built-in models' tables, a folder per model name (``tables/bert-base/accuracy.toml``): a model's gates, targets,
# counts and FP8 settings beside its code, as a model shipped on its own keeps them.
BUILTIN_TABLES = Path(__file__).with_name("tables")


@dataclass(frozen=True)
class ModelSpec:
    """One model as the suite sees it (see the module's docstring).

    ``name``: the registry name (test ids ``<name>-<precision>``); ``module``: the dotted module of its code;
    ``model_class``: the attribute of that module holding the model's class, or a ``(module, config) -> class``
    callable where the class depends on the config; ``param_shapes``: the module's ``(config) -> {name: shape}``
    function's name; ``primary_output``: the output whose tensor metrics are gated (the others are reported);
    ``task_metrics``: the decisions scored against the FP32 outputs by ``task_scorer`` (``module:function``,
    ``(reference, hardware, inputs) -> {metric: TaskMetric}``), empty when the tensor metrics judge it alone;
    ``label_metrics``: the task metrics against a ``--dataset``'s labels, computed by its reader's scorer;
    ``dataset_format``: the dotted module reading ``--dataset`` data for it (``load(path, model, checkpoint=None,
    limit=None)``), None for none; ``streamed_dataset``: whether that reader can give inputs per batch;
    ``checkpoint_type``: the ``model_type`` of its checkpoints' ``config.json``; ``sequence_config``: the config class
    attribute whose ``seq_len`` is capped by a checkpoint's ``max_position_embeddings`` (text models);
    ``tables``: a folder holding the model's own ``accuracy.toml``, ``performance.toml`` and ``profiles.toml``, and
    ``fp8.toml`` (its FP8 settings) where it runs the FP8 precisions, ``audit.toml`` where a compliance audit exempts
    it (``[TEST04.exempt]``, with the reason) (None: its rows are in the suite's or a backend's tables);
    ``aliases``: other names it answers to."""

    name: str
    module: str
    model_class: object
    primary_output: str
    param_shapes: str = "param_shapes"
    task_metrics: tuple[str, ...] = ()
    task_scorer: str | None = None
    label_metrics: tuple[str, ...] = ()
    dataset_format: str | None = None
    streamed_dataset: bool = False
    checkpoint_type: str | None = None
    sequence_config: str | None = None
    tables: Path | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(f"model spec: name {self.name!r} is not a non-empty name")
        if bool(self.task_metrics) != bool(self.task_scorer):
            raise ValueError(f"model spec {self.name!r}: task_metrics {self.task_metrics} and task_scorer "
                             f"{self.task_scorer!r} must be given together")
        if self.label_metrics and not self.dataset_format:
            raise ValueError(f"model spec {self.name!r}: label_metrics {self.label_metrics} without a dataset_format "
                             "that reads labelled data")
        if self.tables is not None:
            object.__setattr__(self, "tables", Path(self.tables))

    def table(self, kind: str) -> Path | None:
        """The model's own ``<kind>.toml`` (accuracy, performance, profiles, fp8, audit), None where the suite's tables hold
        it."""
        if kind not in TABLE_NAMES:
            raise ValueError(f"unknown table {kind!r}; expected one of: {', '.join(TABLE_NAMES)}")
        return None if self.tables is None else self.tables / f"{kind}.toml"

    def model_class_for(self, module, config):
        """The class the module builds for ``config`` (for a shape-only copy)."""
        if callable(self.model_class) and not isinstance(self.model_class, type):
            return self.model_class(module, config)
        return getattr(module, self.model_class) if isinstance(self.model_class, str) else self.model_class


__all__ = ["BUILTIN_TABLES", "ModelSpec", "SPEC_ENTRY_POINT_GROUP", "TABLE_NAMES"]
