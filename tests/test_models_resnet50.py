"""ResNet-50 v1.5 against transformers' ResNetForImageClassification: small checkpoints with unusual sizes written by
``save_pretrained`` and loaded through ``models.load_model``; the v1.5 stride placement; seeded weights and sample
images; bad checkpoints and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import ResNetConfig as HFResNetConfig  # noqa: E402
from transformers import ResNetForImageClassification  # noqa: E402

from models import load_model  # noqa: E402
from models.base import CheckpointError, InputError  # noqa: E402
from models.ops import Ops  # noqa: E402
from models.resnet50 import STEM_CONV, ResNetConfig  # noqa: E402

IMAGE = 72
SMALL = dict(embedding_size=16, hidden_sizes=[24, 40, 56, 72], depths=[1, 2, 1, 1], num_labels=11)
TOLERANCE = 1e-4  # max abs difference relative to the largest |logit|


def randomize_(module: torch.nn.Module, seed: int) -> None:
    """Non-trivial BatchNorm statistics and affine parameters (transformers initialises them to identity) and a
    classifier of order 1, so that a mix-up of mean/var/gamma/beta or of the stride placement shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if not tensor.is_floating_point():
                continue
            leaf = name.rsplit(".", 1)[-1]
            shape = tensor.shape
            if leaf == "running_var":
                tensor.copy_(0.5 + torch.rand(shape, generator=gen))
            elif leaf == "running_mean":
                tensor.copy_(0.3 * torch.randn(shape, generator=gen))
            elif "normalization" in name and leaf == "weight":
                tensor.copy_(0.6 + 0.6 * torch.rand(shape, generator=gen))
            elif leaf == "bias":
                tensor.copy_(0.2 * torch.randn(shape, generator=gen))


def write_checkpoint(directory: Path, seed: int = 0, **overrides) -> ResNetForImageClassification:
    torch.manual_seed(seed)
    model = ResNetForImageClassification(HFResNetConfig(**{**SMALL, **overrides})).eval()
    randomize_(model, seed)
    model.save_pretrained(directory)
    return model


def images(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)


def torch_logits(model, pixel_values: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(pixel_values)).logits.numpy()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("resnet_small")
    return directory, write_checkpoint(directory)


@pytest.mark.parametrize("variant", [{}, {"downsample_in_first_stage": True, "depths": [2, 1, 1, 1]}],
                         ids=["default", "downsample-first-stage"])
def test_matches_transformers(tmp_path, variant):
    reference = write_checkpoint(tmp_path, seed=3, **variant)
    model = load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)
    assert model.config.hidden_sizes == tuple(SMALL["hidden_sizes"]) and model.config.num_labels == SMALL["num_labels"]
    x = images(3)
    expected = torch_logits(reference, x)
    got = model({"pixel_values": x})["logits"]
    assert got.shape == (3, SMALL["num_labels"]) and got.dtype == np.float32
    scale = np.abs(expected).max()
    assert np.abs(got - expected).max() < TOLERANCE * scale, f"max diff {np.abs(got - expected).max()} vs scale {scale}"


def test_v15_stride_in_3x3_conv(checkpoint):
    """In the first bottleneck of a downsampling stage the 1x1 reduce keeps the resolution and the 3x3 halves it."""
    directory, _ = checkpoint
    model = load_model("resnet50", checkpoint=directory, image_size=IMAGE)
    shapes = {}
    model({"pixel_values": images(1)}, Ops(recorder=lambda name, y: shapes.__setitem__(name, y.shape)))
    assert shapes[STEM_CONV] == (1, 16, IMAGE // 2, IMAGE // 2)
    size = IMAGE // 4  # after the stem conv and the max pool; stage 0 keeps it
    assert shapes["resnet.encoder.stages.0.layers.0.layer.1.convolution"][-1] == size
    for stage in (1, 2, 3):
        prefix = f"resnet.encoder.stages.{stage}.layers.0"
        assert shapes[f"{prefix}.layer.0.convolution"][-1] == size  # 1x1: input resolution
        size = (size + 1) // 2
        assert shapes[f"{prefix}.layer.1.convolution"][-1] == size  # 3x3: stride 2
        assert shapes[f"{prefix}.shortcut.convolution"][-1] == size


def test_v1_checkpoint_is_rejected_and_differs(tmp_path):
    """A v1 checkpoint (stride in the first 1x1 conv) has the same tensors but computes something else: refused."""
    v1 = write_checkpoint(tmp_path, seed=3, downsample_in_bottleneck=True)
    with pytest.raises(CheckpointError, match="downsample_in_bottleneck"):
        load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)
    config = json.loads((tmp_path / "config.json").read_text())
    config["downsample_in_bottleneck"] = False
    (tmp_path / "config.json").write_text(json.dumps(config))
    v15 = load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)
    x = images(2)
    assert np.abs(v15({"pixel_values": x})["logits"] - torch_logits(v1, x)).max() > 1e-2


def test_seeded_weights_and_samples_are_deterministic():
    small = dict(hidden_sizes=(24, 40, 56, 72), depths=(1, 1, 1, 1), embedding_size=16, image_size=64, num_labels=100)
    a, b = load_model("resnet50", seed=5, **small), load_model("resnet50", seed=5, **small)
    assert a.params.keys() == b.params.keys()
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    c = load_model("resnet50", seed=6, **small)
    assert not np.array_equal(a.params[f"{STEM_CONV}.weight"], c.params[f"{STEM_CONV}.weight"])
    x1, x2 = a.sample_inputs(8, seed=0), b.sample_inputs(8, seed=0)
    assert np.array_equal(x1["pixel_values"], x2["pixel_values"])
    assert not np.array_equal(x1["pixel_values"], a.sample_inputs(8, seed=1)["pixel_values"])
    logits = a(x1)["logits"]
    assert 1.0 < logits.std() < 6.0 and len(set(logits.argmax(axis=1).tolist())) > 2


def test_sample_labels_are_the_classes_the_images_show(tmp_path):
    """The seeded model's evaluation images carry labels: the class each image was drawn from, mapped to the label
    the seeded classifier was fitted to give it; a checkpoint's classifier was fitted to no such task: none."""
    from models import resnet50

    small = dict(hidden_sizes=(24, 40, 56, 72), depths=(1, 1, 1, 1), embedding_size=16, image_size=64, num_labels=100)
    model = load_model("resnet50", seed=4, **small)
    assert model.weight_seed == 4
    labels = model.sample_labels(9, seed=2)
    images, shown = resnet50.class_samples(9, model.config, np.random.default_rng([2, 0x52455336]))
    assert np.array_equal(images, model.sample_inputs(9, seed=2)["pixel_values"])
    assert np.array_equal(labels, resnet50.prototype_classes(model.config, seed=4)[shown])
    assert not np.array_equal(labels, model.sample_labels(9, seed=3))
    write_checkpoint(tmp_path, seed=3)
    assert load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE).sample_labels(9, seed=2) is None
    assert load_model("resnet50", seed=4, **{**small, "num_labels": 8}).sample_labels(9) is None  # fewer labels than classes


def test_seeded_classifier_tells_its_classes_apart_by_clear_margins():
    """On the stored FP32 outputs of the evaluation images (the default size, seed 0): most images are given the label
    of the class they show, many classes are predicted, and the top-1 margins stand well clear of rounding noise
    (a random 1000-way head: median 0.31, a tenth below 0.03)."""
    from conformance.accuracy import reference
    from models import resnet50

    logits = reference.load("resnet50")["logits"]
    rng = np.random.default_rng([0, 0x52455336])  # sample_inputs' stream: the class of each image is drawn first
    shown = rng.integers(0, resnet50.PROTOTYPES, size=len(logits))
    labels = resnet50.prototype_classes(ResNetConfig(), seed=0)
    top = np.sort(logits, axis=1)
    margin = top[:, -1] - top[:, -2]
    assert np.mean(logits.argmax(axis=1) == labels[shown]) >= 0.75
    assert len(set(logits.argmax(axis=1).tolist())) >= 10
    assert np.median(margin) > 2.0 and np.percentile(margin, 10) > 0.3


def test_sample_images_look_natural():
    """ImageNet-normalised, channel-correlated, with most power at low spatial frequencies."""
    model = load_model("resnet50", hidden_sizes=(8, 8, 8, 8), depths=(1, 1, 1, 1), embedding_size=8, image_size=96)
    x = model.sample_inputs(16, seed=0)["pixel_values"]
    assert x.shape == (16, 3, 96, 96) and x.dtype == np.float32
    pixels = x * np.array([0.229, 0.224, 0.225])[:, None, None] + np.array([0.485, 0.456, 0.406])[:, None, None]
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
    assert np.all(np.abs(x.mean(axis=(0, 2, 3))) < 0.5) and np.all((x.std(axis=(0, 2, 3)) > 0.3) & (x.std(axis=(0, 2, 3)) < 1.5))
    r, g = x[:, 0].ravel(), x[:, 1].ravel()
    assert np.corrcoef(r, g)[0, 1] > 0.7
    power = np.abs(np.fft.rfft2(x[:, 0] - x[:, 0].mean(axis=(1, 2), keepdims=True))) ** 2
    radius = np.hypot(np.fft.fftfreq(96)[:, None], np.fft.rfftfreq(96)[None, :])
    assert power[:, radius < 0.125].sum() > 0.4 * power.sum()  # 1/f: ~60%; white noise: ~5%


@pytest.mark.parametrize("channels", [3, 1])
def test_sample_images_are_made_in_bounded_memory_and_the_same_whatever_the_chunk(monkeypatch, channels):
    """The images are made a few at a time (their spectra are float64 complex: at once, a release profile's 2048
    images took 15 GB); chunked or in one piece they are the same bits, and the stream goes on from the same place."""
    import tracemalloc

    from models import resnet50

    config = ResNetConfig(image_size=64, num_channels=channels)
    monkeypatch.setattr(resnet50, "IMAGE_CHUNK", 10_000)
    whole, rng_whole = resnet50.class_samples(70, config, np.random.default_rng(3)), np.random.default_rng(3)
    resnet50.class_samples(70, config, rng_whole)
    monkeypatch.setattr(resnet50, "IMAGE_CHUNK", 8)
    rng = np.random.default_rng(3)
    tracemalloc.start()
    try:
        chunked = resnet50.class_samples(70, config, rng)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(whole[0].view(np.uint32), chunked[0].view(np.uint32)) and np.array_equal(whole[1], chunked[1])
    assert rng.standard_normal() == rng_whole.standard_normal()
    rgb = 70 * 3 * 64 * 64 * 4  # the float32 RGB images before normalisation (in one piece: 16x that)
    assert peak < 3 * rgb, f"{peak} bytes at the peak for {rgb} bytes of RGB images"


def test_default_config_is_resnet50():
    config = ResNetConfig()
    assert (config.embedding_size, config.hidden_sizes, config.depths, config.num_labels, config.image_size) == \
        (64, (256, 512, 1024, 2048), (3, 4, 6, 3), 1000, 224)
    from models.resnet50 import param_shapes

    hf_count = sum(p.numel() for p in ResNetForImageClassification(HFResNetConfig(num_labels=1000)).parameters())
    assert sum(int(np.prod(s)) for n, s in param_shapes(config).items() if "running" not in n) == hf_count  # 25.6M


# -- bad checkpoints and inputs ------------------------------------------------------------------------------------------
def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model("resnet50", checkpoint=tmp_path / "nope")


def _rewrite(directory: Path, edit) -> None:
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"))


def test_missing_tensor(tmp_path):
    write_checkpoint(tmp_path)
    name = "resnet.encoder.stages.1.layers.0.layer.1.normalization.running_var"
    _rewrite(tmp_path, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=f"missing tensor '{name}'"):
        load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)


def test_wrong_shape_tensor(tmp_path):
    write_checkpoint(tmp_path)
    name = "resnet.encoder.stages.2.layers.0.layer.1.convolution.weight"
    _rewrite(tmp_path, lambda t: t.__setitem__(name, np.zeros((14, 14, 1, 3), np.float32)))
    with pytest.raises(CheckpointError, match=rf"'{name}' has shape \(14, 14, 1, 3\), expected \(14, 14, 3, 3\)"):
        load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)


def test_truncated_file(tmp_path):
    write_checkpoint(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*(corrupted|truncated)"):
        load_model("resnet50", checkpoint=tmp_path, image_size=IMAGE)


@pytest.mark.parametrize("pixel_values, message", [
    (np.zeros((2, 3, 64, 64), np.float32), r"'pixel_values' has shape \(2, 3, 64, 64\), expected .*\(batch, 3, 72, 72\)"),
    (np.zeros((2, 72, 72, 3), np.float32), r"'pixel_values' has shape \(2, 72, 72, 3\)"),
    (np.zeros((2, 3, 72, 72), np.int64), r"'pixel_values' has dtype int64, expected float"),
    (np.full((2, 3, 72, 72), np.nan, np.float32), r"'pixel_values' contains NaN"),
], ids=["wrong-size", "nhwc", "int-dtype", "nan"])
def test_bad_inputs(checkpoint, pixel_values, message):
    directory, _ = checkpoint
    model = load_model("resnet50", checkpoint=directory, image_size=IMAGE)
    with pytest.raises(InputError, match=message):
        model({"pixel_values": pixel_values})
    with pytest.raises(InputError, match="missing input.*pixel_values"):
        model({"images": pixel_values})


def test_a_checkpoint_with_transformers_default_labels_loads(tmp_path):
    """transformers writes neither num_labels nor id2label when the labels are its default (two)."""
    config = HFResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1])
    ResNetForImageClassification(config).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "num_labels" not in raw and "id2label" not in raw
    assert load_model("resnet50", checkpoint=tmp_path).config.num_labels == 2
