"""ResNet-50 and Wide & Deep FP32 forward: the numpy models against the same weights in torch eager on CPU, with the
same number of threads. Target: numpy <= 1.5x torch.

- resnet50: batch 1 at 3x224x224 (the seed shape) against transformers' ResNetForImageClassification.
- widedeep: batch 1 (the issue's seed shape; it measures per-op overhead of 60 small ops, not arithmetic) and batch
  1024 (the smallest batch the seed benchmark runs Wide & Deep at; the MLP's GEMMs dominate) against a torch
  Wide & Deep written here (nn.Embedding tables, nn.Linear MLP).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import ResNetConfig as HFResNetConfig  # noqa: E402
from transformers import ResNetForImageClassification  # noqa: E402

from models import resnet50, widedeep  # noqa: E402
from tests.benchmarks.bench_utils import blas_threads  # noqa: E402

TARGET_RATIO = 1.5
ROUNDS = 5


def _bench_numpy(benchmark, group, model, inputs):
    benchmark.group = group
    benchmark.extra_info.update(role="subject", target=TARGET_RATIO, threads=blas_threads())
    benchmark.pedantic(model, args=(inputs,), rounds=ROUNDS, warmup_rounds=1)


def _bench_torch(benchmark, group, module, args):
    benchmark.group = group
    benchmark.extra_info.update(role="baseline", threads=torch.get_num_threads())

    def forward():
        with torch.inference_mode():
            return module(*args)

    benchmark.pedantic(forward, rounds=ROUNDS, warmup_rounds=1)


# -- resnet50 ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet():
    model = resnet50.load(seed=0)
    c = model.config
    reference = ResNetForImageClassification(HFResNetConfig(
        num_channels=c.num_channels, embedding_size=c.embedding_size, hidden_sizes=list(c.hidden_sizes),
        depths=list(c.depths), layer_type=c.layer_type, downsample_in_first_stage=c.downsample_in_first_stage,
        num_labels=c.num_labels)).eval()
    missing, unexpected = reference.load_state_dict({k: torch.from_numpy(v) for k, v in model.params.items()}, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
    inputs = model.sample_inputs(1, seed=0)
    pixels = torch.from_numpy(inputs["pixel_values"])
    torch.set_num_threads(blas_threads())
    with torch.inference_mode():
        expected = reference(pixels).logits.numpy()
    got = model(inputs)["logits"]
    assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max(), "numpy and torch disagree"
    return model, inputs, reference, (pixels,)


def test_resnet50_numpy_forward(benchmark, resnet):
    model, inputs, _, _ = resnet
    _bench_numpy(benchmark, "resnet50", model, inputs)


def test_resnet50_torch_forward(benchmark, resnet):
    _, _, reference, args = resnet
    _bench_torch(benchmark, "resnet50", reference, args)


# -- widedeep ---------------------------------------------------------------------------------------------------------------
class TorchWideDeep(torch.nn.Module):
    """Wide & Deep in torch eager holding the numpy model's weights (same tensor names and layout)."""

    def __init__(self, params: dict[str, np.ndarray], config: widedeep.WideDeepConfig):
        super().__init__()
        t = {k: torch.from_numpy(v) for k, v in params.items()}
        features = range(config.num_categorical)
        self.wide = torch.nn.ModuleList(torch.nn.Embedding.from_pretrained(t[f"wide.categorical.{f}.weight"]) for f in features)
        self.embeddings = torch.nn.ModuleList(torch.nn.Embedding.from_pretrained(t[f"deep.embeddings.{f}.weight"]) for f in features)
        self.wide_numeric = self._linear(t, "wide.numeric")
        self.mlp = torch.nn.ModuleList(self._linear(t, f"deep.mlp.{k}") for k in range(len(config.hidden_sizes)))
        self.head = self._linear(t, "deep.head")

    @staticmethod
    def _linear(t, name):
        weight = t[f"{name}.weight"]
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0])
        layer.weight.data, layer.bias.data = weight, t[f"{name}.bias"]
        return layer

    def forward(self, ids, numeric):
        wide = sum(table(ids[:, f]) for f, table in enumerate(self.wide)) + self.wide_numeric(numeric)
        h = torch.cat([table(ids[:, f]) for f, table in enumerate(self.embeddings)] + [numeric], dim=1)
        for layer in self.mlp:
            h = torch.relu(layer(h))
        click = torch.sigmoid(wide + self.head(h))
        return torch.cat([1 - click, click], dim=1)


@pytest.fixture(scope="module")
def widedeep_pair():
    model = widedeep.load(seed=0)
    reference = TorchWideDeep(model.params, model.config).eval()
    torch.set_num_threads(blas_threads())
    return model, reference


def _widedeep_inputs(model, reference, batch):
    inputs = model.sample_inputs(batch, seed=0)
    args = (torch.from_numpy(inputs["categorical_ids"]), torch.from_numpy(inputs["numeric_features"]))
    with torch.inference_mode():
        expected = reference(*args).numpy()
    assert np.abs(model(inputs)["probabilities"] - expected).max() < 1e-4, "numpy and torch disagree"
    return inputs, args


@pytest.mark.parametrize("batch", [1, 1024])
def test_widedeep_numpy_forward(benchmark, widedeep_pair, batch):
    model, reference = widedeep_pair
    inputs, _ = _widedeep_inputs(model, reference, batch)
    _bench_numpy(benchmark, f"widedeep-batch{batch}", model, inputs)


@pytest.mark.parametrize("batch", [1, 1024])
def test_widedeep_torch_forward(benchmark, widedeep_pair, batch):
    model, reference = widedeep_pair
    _, args = _widedeep_inputs(model, reference, batch)
    _bench_torch(benchmark, f"widedeep-batch{batch}", reference, args)
