"""A two-layer MLP classifier over 64 float features and 10 classes, written against the suite's model contract.

Its seeded weights: a random He-initialised hidden layer, and a head fitted to the classes with
:func:`models.heads.fit_class_head` on the FP32 features of samples whose classes are planted (seed 7, disjoint from
the evaluation's 0 and the FP8 calibration's 1), so its decisions have a trained head's margins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.base import (InputSpec, Model, ParamInit, apply_overrides, cached_params, check_fields, parameter_bytes)
from models.heads import fit_class_head
from models.ops import FP32, Ops
from models.spec import ModelSpec

FIT_SEED = 7
FIT_SAMPLES = 256


@dataclass(frozen=True)
class TinyMlpConfig:
    features: int = 64
    hidden: int = 128
    classes: int = 10

    def __post_init__(self):
        check_fields(self, {"features": (1, 4096), "hidden": (1, 4096), "classes": (2, 1000)})


def param_shapes(config: TinyMlpConfig) -> dict[str, tuple[int, ...]]:
    return {"hidden.weight": (config.hidden, config.features), "hidden.bias": (config.hidden,),
            "head.weight": (config.classes, config.hidden), "head.bias": (config.classes,)}


def _class_centres(config: TinyMlpConfig) -> np.ndarray:
    return np.random.default_rng([config.features, config.classes, 0x4D4C50]).normal(size=(config.classes, config.features))


def planted_samples(config: TinyMlpConfig, batch_size: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Inputs drawn around one centre per class, and the class each was drawn from."""
    rng = np.random.default_rng([seed, 0x4D4C50])
    labels = rng.integers(0, config.classes, batch_size)
    x = _class_centres(config)[labels] + rng.normal(size=(batch_size, config.features))
    return {"features": x.astype(np.float32)}, labels


class TinyMlp(Model):
    name = "tinymlp"
    output_names = ("logits",)

    @property
    def input_specs(self):
        return (InputSpec("features", (self.config.features,), "float", "float32"),)

    def hidden(self, inputs, ops: Ops):
        x = ops.input(inputs["features"], name="features")
        h = ops.linear(x, self.params["hidden.weight"], self.params["hidden.bias"], name="hidden")
        return ops.relu(h, name="hidden.activation")

    def forward(self, inputs, ops: Ops):
        h = self.hidden(inputs, ops)
        return {"logits": ops.linear(h, self.params["head.weight"], self.params["head.bias"], name="head")}

    def sample_inputs(self, batch_size: int, seed: int = 0):
        return planted_samples(self.config, batch_size, seed)[0]


def seeded_params(config: TinyMlpConfig, seed: int) -> dict[str, np.ndarray]:
    init = ParamInit(seed)
    params = {"hidden.weight": init.normal("hidden.weight", (config.hidden, config.features),
                                           std=float(np.sqrt(2.0 / config.features))),
              "hidden.bias": init.constant((config.hidden,), 0.0)}
    backbone = TinyMlp(config, params)
    inputs, labels = planted_samples(config, FIT_SAMPLES, FIT_SEED)
    params["head.weight"], params["head.bias"] = fit_class_head(backbone.hidden(inputs, FP32), labels, config.classes)
    return params


def build_config(**overrides) -> TinyMlpConfig:
    return apply_overrides(TinyMlpConfig(), overrides)


def host_bytes(config: TinyMlpConfig, batch: int) -> tuple[int, int]:
    return parameter_bytes(param_shapes(config)), 4 * batch * max(config.features, config.hidden)


def assemble(config, params):
    return TinyMlp(config, cached_params(params, param_shapes(config), "tinymlp (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> TinyMlp:
    if checkpoint is not None:
        raise ValueError("tinymlp reads no checkpoints")
    config = build_config(**overrides)
    return TinyMlp(config, seeded_params(config, seed))


SPEC = ModelSpec(
    name="tinymlp", module=__name__, model_class="TinyMlp", primary_output="logits",
    task_metrics=("top1_agreement", "top5_agreement"),
    task_scorer="conformance.accuracy.metrics:classification_agreement",
    tables=Path(__file__).with_name("tables"))
