"""What the user asked the suite to judge: their checkpoints (``--checkpoint MODEL=DIR``), their evaluation data
(``--dataset MODEL=PATH``) and sample caps (``--samples``), loaded and checked before any model runs, and the FP32
reference outputs of those cases (computed at run time, cached on disk).

A model with neither keeps the suite's seeded weights, synthetic samples and stored FP32 references. A checkpoint
without a data set is judged on the model's synthetic samples (at the checkpoint's sizes); a data set without a
checkpoint runs the seeded weights on the user's data (tensor gates; label accuracy of seeded weights means little).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from boundedio import JSON_CONFIG_LIMIT, InputFileError, load_json, open_regular
from conformance.datasets import DatasetError, EvaluationSet, load_dataset
from conformance.datasets.cache import OutputCache, entry_key
from conformance.distributed.source import BatchSource, Inputs, row_count, take
from models import (CheckpointError, Model, load_model, model_module, model_spec, model_specs, run_batched,
                    seeded_weights_kept)
from models.seeds import EVAL_SEED, WEIGHT_SEED

# config.json model_type of the checkpoints each model reads, as its spec declares it.
MODEL_TYPES = {name: spec.checkpoint_type for name, spec in model_specs().items()}
# Checkpoint files whose bytes identify it (tokenizer and preprocessing files are part of the data's fingerprint).
CHECKPOINT_FILES = ("config.json", "model.safetensors")


class UserInputError(ValueError):
    """A checkpoint, data set or option combination that cannot be judged: a usage error naming it."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path, "a checkpoint file", error=CheckpointError) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sequence_length(name: str, raw: dict) -> dict[str, int]:
    """A text model's input length: its default (MLPerf's 384; RoFormer's 1024) within the checkpoint's positions."""
    config_class = model_spec(name).sequence_config
    positions = raw.get("max_position_embeddings")
    if config_class is None or not isinstance(positions, int) or isinstance(positions, bool) or positions < 1:
        return {}
    default = getattr(model_module(name), config_class).seq_len
    return {"seq_len": min(default, positions)} if positions < default else {}


def load_checkpoint(name: str, directory: Path, allow_unused_weights: bool = False) -> tuple[Model, dict[str, Any]]:
    """The model of checkpoint ``directory`` and its provenance (path, file hashes, config summary, tensor dtypes, the
    tensors it does not read). Every tensor must be used unless ``allow_unused_weights``."""
    directory = Path(directory)
    config_path = directory / "config.json"
    raw: dict = {}
    if config_path.exists():
        try:
            raw = load_json(config_path, "a checkpoint's config.json", JSON_CONFIG_LIMIT)
        except InputFileError:
            raw = {}  # load_model names the error
    if not isinstance(raw, dict):
        raw = {}
    model_type = raw.get("model_type")
    if model_type is not None and model_type != MODEL_TYPES[name]:
        shown = repr(model_type) if len(repr(model_type)) <= 60 else repr(model_type)[:57] + "..."
        raise CheckpointError(f"{name} checkpoint {str(directory)!r}: config.json has model_type {shown}; "
                              f"a {name} checkpoint has {MODEL_TYPES[name]!r} (is it the checkpoint of another model?)")
    model = load_model(name, checkpoint=directory, allow_unused_weights=allow_unused_weights,
                       **_sequence_length(name, raw))
    files = {f: _sha256(directory / f) for f in CHECKPOINT_FILES}
    provenance = {
        "path": str(directory.resolve()),
        "sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(),
        "files": files,
        "architectures": raw.get("architectures"),
        "config": config_summary(model),
        "parameters": model.num_parameters,
        "dtypes": dict(model.checkpoint_dtypes),
        "unused_tensors": list(model.unused_tensors),  # accepted with --allow-unused-weights
        "ignored_tensors": dict(model.ignored_tensors),  # buffers that leave the computation unchanged
    }
    return model, provenance


def config_summary(model: Model) -> dict[str, Any]:
    """The sizes that say what a checkpoint is (layers, widths, heads, vocabulary, classes, input length)."""
    wanted = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
              "embedding_size", "seq_len", "depths", "hidden_sizes", "num_labels", "image_size", "embedding_dim",
              "bucket_sizes", "num_blocks", "d_model", "frames")
    config = model.config
    summary = {}
    for key in wanted:
        if hasattr(config, key):
            value = getattr(config, key)
            if key == "bucket_sizes":
                value = f"{len(value)} features, {sum(value)} buckets"
            summary[key] = list(value) if isinstance(value, tuple) else value
    return summary


@dataclass
class UserCase:
    """One model as the user asked for it: its model, evaluation set (or None: synthetic samples) and provenance."""

    name: str
    model: Model
    checkpoint: dict[str, Any] | None  # provenance of --checkpoint, None for seeded weights
    evaluation: EvaluationSet | None
    limit: int | None  # --samples for this model
    calibration: EvaluationSet | None = None  # --calibration: the FP8 scales' calibration data (None: synthetic)
    synthetic: dict[str, Any] = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        return self.evaluation is not None and self.evaluation.labelled

    def inputs(self, count: int) -> Inputs:
        """The model inputs: the whole evaluation set (a source read per batch when it is streamed), or ``count``
        synthetic samples."""
        if self.evaluation is not None:
            return self.evaluation.inputs
        return self.model.sample_inputs(count, seed=EVAL_SEED)

    def judged(self) -> dict[str, Any]:
        """What the report says was judged."""
        out: dict[str, Any] = {"checkpoint": self.checkpoint or {"seeded_weights": WEIGHT_SEED}}
        if self.evaluation is not None:
            out["dataset"] = self.evaluation.provenance
        else:
            out["dataset"] = {"format": "synthetic", "seed": EVAL_SEED, **self.synthetic}
        out["task_metrics_against"] = "labels and fp32" if self.labelled else "fp32"
        out["fp8_calibration"] = (self.calibration.provenance if self.calibration is not None
                                  else "synthetic samples of the model (--calibration MODEL=PATH gives real ones)")
        return out

    def calibration_inputs(self) -> dict[str, np.ndarray] | None:
        """Inputs the FP8 input scales are calibrated on: the ``--calibration`` data, or None (the backend's own)."""
        return None if self.calibration is None else self.calibration.whole()

    def reference(self, inputs: Inputs, batch_size: int, cache: OutputCache,
                  compute: Callable[[Inputs], dict[str, np.ndarray]] | None = None
                  ) -> tuple[dict, bool]:
        """FP32 outputs of ``inputs`` (from the cache when the same checkpoint, data and code made them before), else
        computed by ``compute(inputs)`` (default: in this process, in batches of ``batch_size``; the accuracy tests
        pass their engine's run)."""
        data = self.evaluation.provenance if self.evaluation is not None else {
            "format": "synthetic", "seed": EVAL_SEED, "count": row_count(inputs)}
        checkpoint = self.checkpoint["files"] if self.checkpoint else {"seeded_weights": WEIGHT_SEED}
        key = entry_key(self.name, checkpoint, {**data, "config": config_summary(self.model)})
        run = compute if compute is not None else (lambda given: _run_batched(self.model, given, batch_size))
        return cache.get_or_compute(self.name, key, lambda: run(inputs),
                                    names=self.model.output_names, rows=row_count(inputs))


def _run_batched(model: Model, inputs: Inputs, batch_size: int) -> dict[str, np.ndarray]:
    """:func:`models.run_batched` over ``inputs``, a source read one batch at a time (the same batches, the same
    bits)."""
    if not isinstance(inputs, BatchSource):
        return run_batched(model, inputs, batch_size)
    count = row_count(inputs)
    parts = [model(take(inputs, start, min(start + batch_size, count))) for start in range(0, count, batch_size)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def load_cases(models, checkpoints: dict[str, Path], datasets: dict[str, Path], samples: dict[str, int],
               calibrations: dict[str, Path] | None = None, allow_unused_weights: bool = False,
               say: Callable[[str], None] | None = None) -> dict[str, UserCase]:
    """The user's cases (models named by ``--checkpoint``, ``--dataset`` or ``--calibration``), each loaded and
    checked: a UserInputError names the option, the model and what is wrong. A checkpoint's tensors must all be used
    by its config unless ``allow_unused_weights`` (``--allow-unused-weights``: the report lists them). ``say(line)``
    is told each step as it starts (reading a large data set takes minutes)."""
    calibrations = calibrations or {}
    say = say or (lambda line: None)
    for option, given in (("--checkpoint", checkpoints), ("--dataset", datasets), ("--samples", samples),
                          ("--calibration", calibrations)):
        for name in given:
            if name != "*" and name not in models:
                raise UserInputError(f"{option} {name}=...: model {name!r} is not selected (--model "
                                     f"{','.join(models)}); select it or drop the option")
    cases = {}
    for name in models:
        if name not in checkpoints and name not in datasets and name not in calibrations:
            continue
        limit = samples.get(name, samples.get("*"))
        provenance = None
        if name in checkpoints:
            say(f"{name}: reading the checkpoint {checkpoints[name]}")
            try:
                model, provenance = load_checkpoint(name, checkpoints[name], allow_unused_weights)
            except CheckpointError as exc:
                raise UserInputError(f"--checkpoint {name}={checkpoints[name]}: {exc}") from None
        else:
            if not seeded_weights_kept(name, seed=WEIGHT_SEED):
                say(f"{name}: building the seeded weights (once per machine: the cache keeps them)")
            model = load_model(name, seed=WEIGHT_SEED)
        evaluation = None
        if name in datasets:
            say(f"{name}: reading the data set {datasets[name]}")
            try:
                evaluation = load_dataset(name, datasets[name], model, checkpoint=checkpoints.get(name), limit=limit,
                                          stream=True)
            except DatasetError as exc:
                raise UserInputError(f"--dataset {name}={datasets[name]}: {exc}") from None
            if evaluation.units == 0:
                raise UserInputError(f"--dataset {name}={datasets[name]}: holds no evaluation samples")
        calibration = None
        if name in calibrations:
            say(f"{name}: reading the calibration data {calibrations[name]}")
            try:
                calibration = load_dataset(name, calibrations[name], model, checkpoint=checkpoints.get(name))
            except DatasetError as exc:
                raise UserInputError(f"--calibration {name}={calibrations[name]}: {exc}") from None
            if calibration.units == 0:
                raise UserInputError(f"--calibration {name}={calibrations[name]}: holds no samples")
        cases[name] = UserCase(name, model, provenance, evaluation, limit, calibration)
    return cases
