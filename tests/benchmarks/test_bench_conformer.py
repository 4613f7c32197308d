"""Conformer FP32 forward at the seed shape (batch 1, src 3x64x512, Conformer-M): the numpy model against the same
weights in torch eager (transformers' Wav2Vec2ConformerEncoder plus an ESPnet Conv2dSubsampling written here), with
the same number of threads. Target: numpy <= 1.5x torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import Wav2Vec2ConformerConfig  # noqa: E402
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import Wav2Vec2ConformerEncoder  # noqa: E402

from models.conformer import load  # noqa: E402
from tests.benchmarks.bench_utils import blas_threads  # noqa: E402

GROUP = "conformer"
TARGET_RATIO = 1.5
ROUNDS = 5


class Conv2dSubsampling(torch.nn.Module):
    """ESPnet's Conv2dSubsampling (padding 1) over (mel, time) of (batch, channels, mel, time) features."""

    def __init__(self, in_channels: int, hidden: int, feature_bins: int):
        super().__init__()
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(in_channels, hidden, 3, 2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(hidden, hidden, 3, 2, padding=1), torch.nn.ReLU(),
        )
        self.out = torch.nn.Sequential(torch.nn.Linear(hidden * (((feature_bins + 1) // 2 + 1) // 2), hidden))

    def forward(self, src):
        x = self.conv(src)  # (B, D, F/4, T/4)
        b, d, f, t = x.shape
        return self.out(x.permute(0, 3, 1, 2).reshape(b, t, d * f))


class TorchConformer(torch.nn.Module):
    def __init__(self, config: Wav2Vec2ConformerConfig, in_channels: int, feature_bins: int):
        super().__init__()
        self.encoder = Wav2Vec2ConformerEncoder(config)
        self.encoder.embed = Conv2dSubsampling(in_channels, config.hidden_size, feature_bins)

    def forward(self, src, src_pad_mask):
        return self.encoder(self.encoder.embed(src), attention_mask=~src_pad_mask).last_hidden_state


@pytest.fixture(scope="module")
def models_and_inputs():
    model = load(seed=0)
    c = model.config
    config = Wav2Vec2ConformerConfig(
        hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
        conv_depthwise_kernel_size=c.conv_depthwise_kernel_size, num_hidden_layers=c.num_hidden_layers,
        hidden_act=c.hidden_act, position_embeddings_type=c.position_embeddings_type, layer_norm_eps=c.layer_norm_eps,
        attn_implementation="sdpa",
    )
    reference = TorchConformer(config, c.in_channels, c.feature_bins).eval()
    state = {k: torch.from_numpy(v) for k, v in model.params.items()}
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("encoder.pos_conv_embed.") for k in missing), (missing, unexpected)
    inputs = model.sample_inputs(1, seed=0)
    torch_inputs = (torch.from_numpy(inputs["src"]), torch.from_numpy(inputs["src_pad_mask"]))
    torch.set_num_threads(blas_threads())
    with torch.inference_mode():
        expected = reference(*torch_inputs).numpy()
    got = model(inputs)["memory"]
    valid = ~inputs["src_pad_mask"]
    assert np.abs(got[valid] - expected[valid]).max() < 1e-4 * np.abs(expected).max(), "numpy and torch disagree"
    return model, inputs, reference, torch_inputs


def test_conformer_numpy_forward(benchmark, models_and_inputs):
    model, inputs, _, _ = models_and_inputs
    benchmark.group = GROUP
    benchmark.extra_info.update(role="subject", target=TARGET_RATIO, threads=blas_threads())
    benchmark.pedantic(model, args=(inputs,), rounds=ROUNDS, warmup_rounds=1)


def test_conformer_torch_forward(benchmark, models_and_inputs):
    _, _, reference, torch_inputs = models_and_inputs
    benchmark.group = GROUP
    benchmark.extra_info.update(role="baseline", threads=torch.get_num_threads())

    def forward():
        with torch.inference_mode():
            return reference(*torch_inputs)

    benchmark.pedantic(forward, rounds=ROUNDS, warmup_rounds=1)
