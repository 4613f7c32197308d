"""bert-base, albert, roformer FP32 forward at the seed shape (batch 1; seq 384, 384, 1024) with seeded weights: the
numpy model against the transformers model in torch eager (eval mode, its default attention) with the same weights
(loaded from the numpy parameters) and the same number of threads, in the same run. Target: numpy <= 1.5x torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import models  # noqa: E402
from tests.benchmarks.bench_utils import blas_threads  # noqa: E402

TARGET_RATIO = 1.5
ROUNDS = 3  # full-size models: a forward takes 0.3-3 s

TORCH_CLASSES = {
    "bert-base": (transformers.BertConfig, transformers.BertForQuestionAnswering, {}),
    "albert": (transformers.AlbertConfig, transformers.AlbertForQuestionAnswering, {}),
    "roformer": (transformers.RoFormerConfig, transformers.RoFormerForSequenceClassification, {"num_labels": 1}),
}


@pytest.fixture(scope="module", params=list(TORCH_CLASSES))
def pair(request):
    """(name, numpy model, inputs, torch model, torch inputs), checked to agree before timing."""
    name = request.param
    model = models.load_model(name)
    config_cls, model_cls, extra = TORCH_CLASSES[name]
    fields = {k: v for k, v in vars(model.config).items() if k not in ("seq_len", "architecture")}
    reference = model_cls(config_cls(**fields, **extra)).eval()
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in model.params.items()}, strict=True)
    inputs = model.sample_inputs(1, seed=0)
    torch_inputs = {k: torch.from_numpy(v) for k, v in inputs.items()}
    torch.set_num_threads(blas_threads())
    with torch.inference_mode():
        expected = reference(**torch_inputs)
    got = model(inputs)
    for key in model.output_names:
        want = getattr(expected, key).numpy()
        assert np.abs(got[key] - want).max() < 1e-4 * np.abs(want).max(), f"{name} {key}: numpy and torch disagree"
    return name, model, inputs, reference, torch_inputs


def test_numpy_forward(benchmark, pair):
    name, model, inputs, _, _ = pair
    benchmark.group = name
    benchmark.extra_info.update(role="subject", target=TARGET_RATIO, threads=blas_threads())
    benchmark.pedantic(model, args=(inputs,), rounds=ROUNDS, warmup_rounds=1)


def test_torch_forward(benchmark, pair):
    name, _, _, reference, torch_inputs = pair
    benchmark.group = name
    benchmark.extra_info.update(role="baseline", threads=torch.get_num_threads())

    def forward():
        with torch.inference_mode():
            return reference(**torch_inputs)

    benchmark.pedantic(forward, rounds=ROUNDS, warmup_rounds=1)
