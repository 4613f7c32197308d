"""The conformer against transformers' Wav2Vec2Conformer blocks (and a torch ESPnet Conv2dSubsampling written here):
one block, a stack of two, and the whole model loaded from a checkpoint directory written by ``save_pretrained``, at
unusual sizes (hidden 40, 5 heads, FFN 72, kernel 7, 13 frames after subsampling); padding; seeded weights; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import Wav2Vec2ConformerConfig, Wav2Vec2ConformerModel  # noqa: E402

from models import load_model  # noqa: E402
from models.base import CheckpointError, InputError  # noqa: E402
from models.conformer import ConformerConfig, load  # noqa: E402
from models.ops import Ops  # noqa: E402

SIZES = dict(hidden_size=40, num_attention_heads=5, intermediate_size=72, conv_depthwise_kernel_size=7, num_hidden_layers=2)
INPUT_SIZES = dict(in_channels=3, feature_bins=20, frames=52)  # 20 mel bins -> 5, 52 frames -> 13
TOLERANCE = 1e-4  # max abs difference relative to the output's largest magnitude


class Conv2dSubsampling(torch.nn.Module):
    """ESPnet's Conv2dSubsampling with padding 1, over (mel, time) of NCHW (batch, channels, mel, time) features."""

    def __init__(self, in_channels: int, hidden: int, feature_bins: int):
        super().__init__()
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(in_channels, hidden, 3, 2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(hidden, hidden, 3, 2, padding=1), torch.nn.ReLU(),
        )
        bins = ((feature_bins + 1) // 2 + 1) // 2
        self.out = torch.nn.Sequential(torch.nn.Linear(hidden * bins, hidden))

    def forward(self, src):
        x = self.conv(src)  # (B, D, F/4, T/4)
        b, d, f, t = x.shape
        return self.out(x.permute(0, 3, 1, 2).reshape(b, t, d * f))


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Weights of order 1/sqrt(fan_in), norm gains around 1, non-trivial biases and BatchNorm statistics."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if not tensor.is_floating_point():
                continue
            leaf = name.rsplit(".", 1)[-1]
            noise = torch.randn(tensor.shape, generator=gen)
            if leaf == "running_var":
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=gen))
            elif leaf == "running_mean" or leaf in ("bias", "pos_bias_u", "pos_bias_v") or tensor.ndim == 1:
                tensor.copy_(0.2 * noise + (1.0 if "norm" in name and leaf == "weight" else 0.0))
            else:
                tensor.copy_(noise / np.sqrt(max(1, tensor[0].numel())))


def transformers_config(**overrides) -> Wav2Vec2ConformerConfig:
    kwargs = dict(SIZES, hidden_act="swish", position_embeddings_type="relative", attn_implementation="eager", **INPUT_SIZES)
    # a small feature extractor and positional conv: the Wav2Vec2ConformerModel has them, the conformer never reads them
    kwargs.update(num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, conv_dim=(8,), conv_stride=(5,), conv_kernel=(10,))
    kwargs.update(overrides)
    return Wav2Vec2ConformerConfig(**kwargs)


def build_reference(seed=0, **overrides):
    """A transformers Wav2Vec2ConformerModel (only its encoder is used) and a torch subsampling, randomized, eval mode."""
    config = transformers_config(**overrides)
    torch.manual_seed(seed)
    model = Wav2Vec2ConformerModel(config).eval()
    randomize_(model.encoder, seed)
    subsampling = Conv2dSubsampling(config.in_channels, config.hidden_size, config.feature_bins).eval()
    randomize_(subsampling, seed + 1)
    return model, subsampling


def write_checkpoint(directory: Path, model, subsampling) -> Path:
    """``save_pretrained`` of the transformers model, plus the subsampling tensors under ``encoder.embed.``."""
    model.save_pretrained(directory)
    tensors = load_file(str(directory / "model.safetensors"))
    tensors.update({f"encoder.embed.{k}": v.numpy() for k, v in subsampling.state_dict().items()})
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model, subsampling = build_reference()
    directory = write_checkpoint(tmp_path_factory.mktemp("conformer-ckpt"), model, subsampling)
    return model, subsampling, directory


def torch_forward(model, subsampling, src, pad_mask):
    with torch.no_grad():
        hidden = subsampling(torch.from_numpy(src))
        return model.encoder(hidden, attention_mask=torch.from_numpy(~pad_mask)).last_hidden_state.numpy()


def assert_close(ours, expected, what):
    scale = float(np.abs(expected).max())
    diff = float(np.abs(ours - expected).max())
    assert diff < TOLERANCE * scale, f"{what}: max abs diff {diff:.3g} vs output scale {scale:.3g} (limit {TOLERANCE:g} x scale)"


def random_pad_mask(rng, batch, frames, min_valid=1):
    valid = rng.integers(min_valid, frames + 1, size=batch)
    valid[0] = frames  # one unpadded sample in every batch
    return np.arange(frames)[None, :] >= valid[:, None]


# -- cross-checks against transformers -------------------------------------------------------------------------------
@pytest.mark.parametrize("hidden_act", ["swish", "gelu"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "pad-mask"])
def test_block_matches_transformers_encoder_layer(hidden_act, padded):
    model, subsampling = build_reference(seed=3, hidden_act=hidden_act, num_hidden_layers=1)
    ours = load(None, **SIZES | {"num_hidden_layers": 1, "hidden_act": hidden_act}, **INPUT_SIZES)
    ours.params.update({k: v.numpy() for k, v in model.state_dict().items() if k.startswith("encoder.layers.")})
    rng = np.random.default_rng(1)
    batch, frames = 3, 37
    x = rng.standard_normal((batch, frames, SIZES["hidden_size"])).astype(np.float32)
    pad = random_pad_mask(rng, batch, frames, min_valid=5) if padded else None

    layer = model.encoder.layers[0]
    with torch.no_grad():
        xt = torch.from_numpy(x)
        mask = None
        if padded:
            mask = torch.where(torch.from_numpy(pad)[:, None, None, :], torch.finfo(torch.float32).min, 0.0)
            mask = mask.expand(batch, 1, frames, frames)
        expected = layer(xt, attention_mask=mask, relative_position_embeddings=model.encoder.embed_positions(xt)).numpy()
    bias = None if pad is None else np.where(pad, np.finfo(np.float32).min, 0).astype(np.float32)[:, None, None, :]
    got = ours.block(0, x, bias, ours.position_table(frames), Ops())
    rows = ~pad if padded else np.ones((batch, frames), bool)
    assert_close(got[rows], expected[rows], f"block vs Wav2Vec2ConformerEncoderLayer ({hidden_act}, padded={padded})")


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "pad-mask"])
def test_encoder_stack_matches_transformers_encoder(reference, padded):
    model, _, directory = reference
    ours = load(directory)
    rng = np.random.default_rng(2)
    batch, frames = 2, 29
    x = rng.standard_normal((batch, frames, SIZES["hidden_size"])).astype(np.float32)
    pad = random_pad_mask(rng, batch, frames, min_valid=3) if padded else np.zeros((batch, frames), bool)
    with torch.no_grad():
        mask = torch.from_numpy(~pad) if padded else None
        expected = model.encoder(torch.from_numpy(x.copy()), attention_mask=mask).last_hidden_state.numpy()
    got = ours.encode(x, pad if padded else None, Ops())
    assert_close(got[~pad], expected[~pad], f"2-block encoder vs Wav2Vec2ConformerEncoder (padded={padded})")


def test_checkpoint_model_matches_torch(reference):
    model, subsampling, directory = reference
    ours = load_model("conformer", checkpoint=directory)
    assert (ours.config.hidden_size, ours.config.conv_depthwise_kernel_size, ours.config.frames) == (40, 7, 52)
    inputs = ours.sample_inputs(3, seed=5)
    expected = torch_forward(model, subsampling, inputs["src"], inputs["src_pad_mask"])
    got = ours(inputs)["memory"]
    assert got.shape == (3, 13, 40)
    valid = ~inputs["src_pad_mask"]
    assert valid.sum() < valid.size, "the sample set should include padded frames"
    assert_close(got[valid], expected[valid], "conformer checkpoint vs transformers encoder + torch subsampling")


# -- padding ----------------------------------------------------------------------------------------------------------
def test_padded_frames_do_not_change_valid_outputs():
    model = load(seed=4, num_hidden_layers=2)  # the seed benchmark's input shape, two blocks
    inputs = model.sample_inputs(2, seed=7)
    pad = inputs["src_pad_mask"]
    assert pad.any(axis=1).all(), "both samples should have padded tails"
    frame_pad = np.repeat(pad, 4, axis=1)[:, None, None, :]  # (B, 1, 1, 512): input frames under padded output frames
    garbage = np.random.default_rng(0).normal(0, 10, inputs["src"].shape).astype(np.float32)
    noisy = dict(inputs, src=np.where(frame_pad, garbage, inputs["src"]))
    projected = {}

    def record(tag):
        return Ops(recorder=lambda name, y: projected.__setitem__(tag, y) if name == "encoder.embed.out.0" else None)

    clean_out, noisy_out = model(inputs, record("clean"))["memory"], model(noisy, record("noisy"))["memory"]
    assert not np.allclose(projected["clean"][pad], projected["noisy"][pad]), "the garbage should reach the subsampling output"
    np.testing.assert_allclose(noisy_out[~pad], clean_out[~pad], rtol=0, atol=1e-5)


def test_samples_do_not_interact_in_a_batch():
    model = load(seed=4, num_hidden_layers=1)
    inputs = model.sample_inputs(3, seed=2)
    together = model(inputs)["memory"]
    alone = model({k: v[1:2] for k, v in inputs.items()})["memory"]
    np.testing.assert_allclose(together[1:2], alone, rtol=0, atol=1e-5)


# -- sample inputs and seeded weights ---------------------------------------------------------------------------------
def test_sample_inputs_look_like_padded_normalised_log_mels():
    model = load(num_hidden_layers=1)
    inputs = model.sample_inputs(6, seed=0)
    src, pad = inputs["src"], inputs["src_pad_mask"]
    assert src.shape == (6, 3, 64, 512) and src.dtype == np.float32
    assert pad.shape == (6, 128) and pad.dtype == np.bool_
    lengths = (~pad).sum(axis=1)
    assert len(set(lengths.tolist())) > 1 and lengths.min() >= 0.4 * 128
    assert np.array_equal(pad, np.arange(128)[None, :] >= lengths[:, None]), "the mask must be a padded tail"
    for i, length in enumerate(lengths):
        valid = src[i, :, :, : 4 * length]
        assert np.all(src[i, :, :, 4 * length:] == 0), "padded frames must be zero"
        np.testing.assert_allclose(valid.mean(axis=-1), 0, atol=1e-4)
        np.testing.assert_allclose(valid.std(axis=-1), 1, atol=1e-3)
        static = valid[0]
        # spectro-temporal structure: neighbouring frames and bins are correlated, unlike white noise
        assert np.mean(static[:, 1:] * static[:, :-1]) > 0.3
        assert np.mean(static[1:] * static[:-1]) > 0.3
    again = model.sample_inputs(6, seed=0)
    assert all(np.array_equal(inputs[k], again[k]) for k in inputs)
    first_two = model.sample_inputs(2, seed=0)
    assert all(np.array_equal(inputs[k][:2], first_two[k]) for k in inputs), "sample i must not depend on the batch size"
    assert not np.array_equal(model.sample_inputs(1, seed=1)["src"], inputs["src"][:1])


def test_seeded_weights_are_deterministic_and_distinct():
    a, b, c = load(seed=0, num_hidden_layers=2), load(seed=0, num_hidden_layers=2), load(seed=1, num_hidden_layers=2)
    assert a.params.keys() == b.params.keys()
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    name = "encoder.layers.1.self_attn.linear_q.weight"
    assert not np.array_equal(a.params[name], c.params[name])
    assert not np.array_equal(a.params[name], a.params[name.replace("linear_q", "linear_k")])
    assert not np.array_equal(a.params[name], a.params[name.replace("layers.1", "layers.0")])
    inputs = a.sample_inputs(1, seed=0)
    np.testing.assert_array_equal(a(inputs)["memory"], b(inputs)["memory"])


def test_seeded_activations_stay_order_one():
    model = load(seed=0, num_hidden_layers=3)
    spreads: dict[str, float] = {}
    skipped = ("attention_mask", "softmax")  # finfo.min on padded keys; probabilities

    def record(name, y):
        if not name.endswith(skipped):
            spreads[name] = float(np.std(y))

    model(model.sample_inputs(1, seed=0), Ops(recorder=record))
    for name, spread in spreads.items():
        assert 0.05 < spread < 10, f"{name}: activation std {spread:.3g} is not of order 1"
    for i in range(3):
        bn = spreads[f"encoder.layers.{i}.conv_module.batch_norm"]
        assert 0.5 < bn < 2, f"BatchNorm {i} output std {bn:.3g}: running statistics do not fit the activations"
    memory = model(model.sample_inputs(2, seed=0))["memory"]
    valid = ~model.sample_inputs(2, seed=0)["src_pad_mask"]
    frames = memory[valid]
    assert frames.std(axis=0).mean() > 0.3, "outputs barely vary across frames"


# -- bad input --------------------------------------------------------------------------------------------------------
def test_missing_checkpoint_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load(tmp_path / "nowhere")


def _copy_checkpoint(directory: Path, target: Path, edit) -> Path:
    target.mkdir()
    (target / "config.json").write_text((directory / "config.json").read_text())
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(target / "model.safetensors"))
    return target


def test_checkpoint_missing_tensor(reference, tmp_path):
    name = "encoder.layers.1.conv_module.depthwise_conv.weight"
    bad = _copy_checkpoint(reference[2], tmp_path / "ckpt", lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=f"missing tensor '{name}' of shape \\(40, 1, 7\\)"):
        load(bad)


def test_checkpoint_missing_subsampling_tensor(reference, tmp_path):
    bad = _copy_checkpoint(reference[2], tmp_path / "ckpt", lambda t: t.pop("encoder.embed.out.0.weight"))
    with pytest.raises(CheckpointError, match="encoder.embed.out.0.weight"):
        load(bad)


def test_checkpoint_wrong_shape(reference, tmp_path):
    name = "encoder.layers.0.self_attn.pos_bias_u"
    bad = _copy_checkpoint(reference[2], tmp_path / "ckpt", lambda t: t.__setitem__(name, np.zeros((8, 5), np.float32)))
    with pytest.raises(CheckpointError, match=f"'{name}' has shape \\(8, 5\\), expected \\(5, 8\\)"):
        load(bad)


def test_truncated_checkpoint(reference, tmp_path):
    bad = tmp_path / "ckpt"
    bad.mkdir()
    (bad / "config.json").write_text((reference[2] / "config.json").read_text())
    data = (reference[2] / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*corrupted or truncated"):
        load(bad)


def test_checkpoint_config_unsupported(reference, tmp_path):
    bad = _copy_checkpoint(reference[2], tmp_path / "ckpt", lambda t: None)
    config = json.loads((bad / "config.json").read_text())
    config["position_embeddings_type"] = "rotary"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="position_embeddings_type 'rotary'"):
        load(bad)


@pytest.mark.parametrize(
    "field, value, message",
    [("conv_depthwise_kernel_size", 32, "must be odd"), ("num_attention_heads", 3, "not a multiple"),
     ("frames", 510, "multiple of 4"), ("hidden_act", "relu", "hidden_act 'relu'")],
)
def test_bad_config(field, value, message):
    with pytest.raises(ValueError, match=message):
        ConformerConfig(**{field: value})


def test_unknown_override():
    with pytest.raises(TypeError, match="unknown config field.*d_model"):
        load(d_model=128)


def test_bad_inputs():
    model = load(num_hidden_layers=1)
    good = model.sample_inputs(1, seed=0)
    expected = r"'src' has shape \(1, 3, 512, 64\), expected src: float array of shape \(batch, 3, 64, 512\)"
    with pytest.raises(InputError, match=expected):
        model(dict(good, src=good["src"].transpose(0, 1, 3, 2).copy()))
    with pytest.raises(InputError, match=r"'src_pad_mask' has shape \(1, 512\)"):
        model(dict(good, src_pad_mask=np.zeros((1, 512), bool)))
    with pytest.raises(InputError, match="'src' has dtype int64, expected float"):
        model(dict(good, src=good["src"].astype(np.int64)))
    with pytest.raises(InputError, match="'src_pad_mask' has dtype float32, expected bool"):
        model(dict(good, src_pad_mask=good["src_pad_mask"].astype(np.float32)))
    with pytest.raises(InputError, match=r"missing input\(s\) \['src_pad_mask'\]"):
        model({"src": good["src"]})
