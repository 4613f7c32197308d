"""The resnet50 image-folder reader against transformers: pixel values equal the ConvNeXt/ViT image processors'
(Pillow backend) on the same images, for the checkpoint's preprocessor_config.json and for MLPerf's default; top-1 and
top-5 against the labels equal those of the transformers model's logits; bad folders give messages naming file:line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from PIL import Image  # noqa: E402
from transformers import ResNetConfig as HFResNetConfig  # noqa: E402
from transformers import ResNetForImageClassification  # noqa: E402
from transformers.models.convnext.image_processing_pil_convnext import ConvNextImageProcessorPil  # noqa: E402
from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil  # noqa: E402

from conformance.datasets import DatasetError, load_dataset, sha256_files  # noqa: E402
from models import load_model  # noqa: E402

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
# microsoft/resnet-50's preprocessor_config.json
RESNET50_PREPROCESSOR = {
    "image_processor_type": "ConvNextImageProcessor", "crop_pct": 0.875, "do_normalize": True, "do_rescale": True,
    "do_resize": True, "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 224},
}
TINY = dict(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], num_labels=10)
# (file, (width, height), mode): landscape, portrait, square, odd sizes (crop offsets round down), smaller than the
# crop, grayscale
IMAGES = [("a.jpg", (300, 200), "RGB"), ("b.png", (181, 263), "RGB"), ("sub/c.png", (224, 224), "RGB"),
          ("d.jpeg", (501, 333), "RGB"), ("e.png", (250, 240), "L"), ("f.png", (97, 130), "RGB"),
          ("g.jpg", (257, 1024), "RGB")]


def write_image(path: Path, size, mode: str, seed: int) -> None:
    """A smooth random picture with some fine detail (so that the resampling filter matters)."""
    rng = np.random.default_rng(seed)
    width, height = size
    coarse = rng.integers(0, 256, (max(height // 16, 2), max(width // 16, 2), 3), dtype=np.uint8)
    image = Image.fromarray(coarse).resize((width, height), Image.BICUBIC)
    detail = rng.integers(-40, 40, (height, width, 3))
    pixels = np.clip(np.asarray(image, np.int64) + detail, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=92) if path.suffix in (".jpg", ".jpeg") else image.save(path)


def rgb_images(folder: Path, names) -> list[Image.Image]:
    out = []
    for name in names:
        with Image.open(folder / name) as image:
            out.append(image.convert("RGB"))
    return out


def write_val_map(folder: Path, entries) -> None:
    (folder / "val_map.txt").write_text("".join(f"{name} {label}\n" for name, label in entries))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    for i, (name, size, mode) in enumerate(IMAGES):
        write_image(folder / name, size, mode, seed=i)
    write_val_map(folder, [(name, i % 10) for i, (name, _, _) in enumerate(IMAGES)])
    return folder


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Non-identity BatchNorm statistics and affine parameters (transformers initialises them to identity)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "running_var":
                tensor.copy_(0.5 + torch.rand(tensor.shape, generator=gen))
            elif leaf == "running_mean":
                tensor.copy_(0.3 * torch.randn(tensor.shape, generator=gen))
            elif "normalization" in name and leaf == "weight":
                tensor.copy_(0.6 + 0.6 * torch.rand(tensor.shape, generator=gen))
            elif leaf == "bias" and tensor.is_floating_point():
                tensor.copy_(0.2 * torch.randn(tensor.shape, generator=gen))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("resnet_tiny")
    torch.manual_seed(0)
    reference = ResNetForImageClassification(HFResNetConfig(**TINY)).eval()
    randomize_(reference, 0)
    reference.save_pretrained(directory)
    return directory, reference


def with_preprocessor(checkpoint_dir: Path, target: Path, config: dict | None) -> Path:
    """A copy of the checkpoint with ``config`` as its preprocessor_config.json (none when None)."""
    target.mkdir()
    for file in checkpoint_dir.iterdir():
        if file.name != "preprocessor_config.json":
            (target / file.name).write_bytes(file.read_bytes())
    if config is not None:
        (target / "preprocessor_config.json").write_text(json.dumps(config))
    return target


@pytest.fixture(scope="module")
def resnet_checkpoint(checkpoint, tmp_path_factory):
    """The tiny checkpoint with microsoft/resnet-50's preprocessor_config.json."""
    return with_preprocessor(checkpoint[0], tmp_path_factory.mktemp("with_processor") / "ckpt", RESNET50_PREPROCESSOR)


@pytest.fixture(scope="module")
def model(checkpoint):
    return load_model("resnet50", checkpoint=checkpoint[0])


def names():
    return [name for name, _, _ in IMAGES]


def test_preprocessor_config_matches_convnext_processor(folder, resnet_checkpoint, model):
    data = load_dataset("resnet50", folder, model, checkpoint=resnet_checkpoint)
    expected = ConvNextImageProcessorPil.from_pretrained(resnet_checkpoint)(
        images=rgb_images(folder, names()), return_tensors="np")["pixel_values"]
    x = data.inputs["pixel_values"]
    assert x.dtype == np.float32 and x.shape == (len(IMAGES), 3, 224, 224)
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-6)
    settings = data.provenance["preprocessing"]
    assert settings["source"] == "the checkpoint's preprocessor_config.json"
    assert settings["resize"] == {"shortest_edge": 256} and settings["center_crop"] == [224, 224]
    assert settings["resample"] == "bicubic" and settings["image_mean"] == IMAGENET_MEAN


def test_mlperf_default_matches_bilinear_256_crop_224(folder, model, checkpoint):
    data = load_dataset("resnet50", folder, model, checkpoint=checkpoint[0])  # no preprocessor_config.json
    processor = ConvNextImageProcessorPil(size={"shortest_edge": 224}, crop_pct=224 / 256, resample=2,
                                          image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)
    expected = processor(images=rgb_images(folder, names()), return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(data.inputs["pixel_values"], expected, rtol=0, atol=1e-6)
    assert data.provenance["preprocessing"]["source"].startswith("MLPerf")
    assert data.provenance["preprocessing"]["resample"] == "bilinear"

    # the same by hand for the 300x200 image: shorter side 256 -> 384x256, crop columns 80..303
    rgb = rgb_images(folder, ["a.jpg"])[0].resize((384, 256), Image.BILINEAR)
    crop = np.asarray(rgb, np.float64)[16:240, 80:304] / 255.0
    by_hand = ((crop - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)
    np.testing.assert_allclose(data.inputs["pixel_values"][0], by_hand, rtol=0, atol=1e-5)


VIT = {"image_processor_type": "ViTImageProcessor", "size": {"height": 224, "width": 224}, "resample": 2,
       "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True, "do_normalize": True}


@pytest.mark.parametrize("vit", [VIT, {**VIT, "do_resize": False, "do_center_crop": True, "crop_size": 224,
                                       "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD}],
                         ids=["warp-224", "crop-only-with-zero-padding"])
def test_vit_processor_config(folder, model, checkpoint, tmp_path, vit):
    ckpt = with_preprocessor(checkpoint[0], tmp_path / "vit", vit)
    data = load_dataset("resnet50", folder, model, checkpoint=ckpt)
    expected = ViTImageProcessorPil.from_pretrained(ckpt)(images=rgb_images(folder, names()),
                                                          return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(data.inputs["pixel_values"], expected, rtol=0, atol=1e-6)
    assert json.loads(json.dumps(data.provenance)) == data.provenance  # plain JSON: part of a cache key


def test_accuracy_matches_transformers(folder, resnet_checkpoint, checkpoint, model, tmp_path):
    _, reference = checkpoint
    pixels = ConvNextImageProcessorPil.from_pretrained(resnet_checkpoint)(
        images=rgb_images(folder, names()), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        torch_logits = reference(pixels).logits
    ranking = torch.argsort(torch_logits, dim=1, descending=True).numpy()
    # labels: the top class, the 3rd (a top-5 hit only) or the last (a miss) of the transformers model's ranking
    labels = [int(ranking[i, (0, 2, 9)[i % 3]]) for i in range(len(IMAGES))]
    labelled = tmp_path / "labelled"
    labelled.mkdir()
    for name in names():
        (labelled / name).parent.mkdir(parents=True, exist_ok=True)
        (labelled / name).write_bytes((folder / name).read_bytes())
    write_val_map(labelled, zip(names(), labels))

    data = load_dataset("resnet50", labelled, model, checkpoint=resnet_checkpoint)
    outputs = model(data.inputs)
    logits = outputs["logits"]
    np.testing.assert_allclose(logits, torch_logits.numpy(), rtol=0, atol=1e-4 * np.abs(torch_logits.numpy()).max())
    label_tensor = torch.tensor(labels)
    top1 = (torch_logits.argmax(dim=1) == label_tensor).double().mean().item()
    top5 = (torch.topk(torch_logits, 5, dim=1).indices == label_tensor[:, None]).any(dim=1).double().mean().item()
    metrics = data.label_metrics(outputs)
    assert set(metrics) == {"top1_accuracy", "top5_accuracy"}
    assert metrics["top1_accuracy"].value == pytest.approx(top1) == pytest.approx(3 / 7)
    assert metrics["top5_accuracy"].value == pytest.approx(top5) == pytest.approx(5 / 7)
    assert metrics["top1_accuracy"].units == len(IMAGES)
    assert data.units == len(IMAGES) and data.labelled

    prov = data.provenance
    assert prov["format"] == "imagenet-val-map" and prov["units"] == prov["rows"] == len(IMAGES)
    assert prov["labels"] == f"{len(set(labels))} distinct of 10 classes"
    assert prov["sha256"] == sha256_files([labelled / "val_map.txt"] + [labelled / n for n in names()])


def test_limit_reads_first_lines(folder, model, checkpoint):
    full = load_dataset("resnet50", folder, model, checkpoint=checkpoint[0])
    first = load_dataset("resnet50", folder / "val_map.txt", model, checkpoint=checkpoint[0], limit=2)
    assert first.units == 2 and first.provenance["labels"] == "2 distinct of 10 classes"
    np.testing.assert_array_equal(first.inputs["pixel_values"], full.inputs["pixel_values"][:2])
    assert first.provenance["sha256"] != full.provenance["sha256"]


@pytest.fixture
def bad_folder(folder, tmp_path):
    for name in ("a.jpg", "b.png"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    return tmp_path


@pytest.mark.parametrize("val_map, words", [
    ("a.jpg 0\nb.png 10\n", ["val_map.txt:2", "label 10", "[0, 10)"]),
    ("a.jpg 0\nb.png -1\n", ["val_map.txt:2", "label -1"]),
    ("a.jpg 0\n\nb.png cat\n", ["val_map.txt:3", "'cat'", "not an int"]),
    ("a.jpg 0 extra\n", ["val_map.txt:1", "3 field(s)", "'<file> <label>'"]),
    ("a.jpg\n", ["val_map.txt:1", "1 field(s)"]),
    ("\n\n", ["val_map.txt", "no entries"]),
    ("a.jpg 0\nmissing.jpg 1\nb.png 2\ngone.png 3\n", ["2 listed file(s) not found", "val_map.txt:2 'missing.jpg'",
                                                      "val_map.txt:4 'gone.png'"]),
], ids=["label-too-large", "label-negative", "label-not-int", "three-fields", "one-field", "empty", "missing-files"])
def test_bad_val_map(bad_folder, model, val_map, words):
    (bad_folder / "val_map.txt").write_text(val_map)
    with pytest.raises(DatasetError) as err:
        load_dataset("resnet50", bad_folder, model)
    for word in words:
        assert word in str(err.value)


def test_undecodable_images_named_together(bad_folder, model):
    (bad_folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (bad_folder / "text.png").write_text("hello")
    truncated = (bad_folder / "a.jpg").read_bytes()[:300]
    (bad_folder / "truncated.jpg").write_bytes(truncated)
    write_val_map(bad_folder, [("a.jpg", 0), ("broken.jpg", 1), ("b.png", 2), ("text.png", 3), ("truncated.jpg", 4)])
    with pytest.raises(DatasetError) as err:
        load_dataset("resnet50", bad_folder, model)
    message = str(err.value)
    assert "3 image(s) Pillow cannot decode" in message
    for word in ("'broken.jpg' (val_map.txt:2", "'text.png' (val_map.txt:4", "'truncated.jpg' (val_map.txt:5"):
        assert word in message
    assert "'a.jpg'" not in message and "'b.png'" not in message


def test_no_val_map(tmp_path, model):
    with pytest.raises(DatasetError, match="no val_map.txt"):
        load_dataset("resnet50", tmp_path, model)


@pytest.mark.parametrize("config, words", [
    ({**RESNET50_PREPROCESSOR, "image_processor_type": "CLIPImageProcessor"},
     ["'CLIPImageProcessor' is not supported", "ConvNextImageProcessor, ViTImageProcessor"]),
    ({k: v for k, v in RESNET50_PREPROCESSOR.items() if k != "image_processor_type"}, ["image_processor_type None"]),
    ({**RESNET50_PREPROCESSOR, "do_pad": True}, ["['do_pad'] are not supported"]),
    ({**RESNET50_PREPROCESSOR, "size": {"shortest_edge": 384}}, ["gives 384x384 images", "224x224"]),
    ({**RESNET50_PREPROCESSOR, "size": {"height": 224, "width": 224}}, ["size {'height': 224, 'width': 224}",
                                                                       "{'shortest_edge': N}"]),
    ({**RESNET50_PREPROCESSOR, "resample": 9}, ["resample 9", "3 (bicubic)"]),
    ({**RESNET50_PREPROCESSOR, "image_std": [0.2, 0.2]}, ["image_std", "3 numbers"]),
    ({**VIT, "crop_pct": 0.875}, ["['crop_pct'] are not supported for ViTImageProcessor"]),
], ids=["clip", "no-type", "do-pad", "size-384", "convnext-height-width", "resample", "std-length", "vit-crop-pct"])
def test_unsupported_preprocessor_config(folder, checkpoint, model, tmp_path, config, words):
    ckpt = with_preprocessor(checkpoint[0], tmp_path / "ckpt", config)
    with pytest.raises(DatasetError) as err:
        load_dataset("resnet50", folder, model, checkpoint=ckpt)
    assert "preprocessor_config.json" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_feature_extractor_layout_with_int_size(folder, checkpoint, resnet_checkpoint, model, tmp_path):
    """The older feature-extractor file (``size`` an int, ``feature_extractor_type``) means the same."""
    old = {"feature_extractor_type": "ConvNextFeatureExtractor", "crop_pct": 0.875, "do_normalize": True,
           "do_resize": True, "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD, "resample": 3, "size": 224}
    ckpt = with_preprocessor(checkpoint[0], tmp_path / "old", old)
    a = load_dataset("resnet50", folder, model, checkpoint=ckpt, limit=2)
    b = load_dataset("resnet50", folder, model, checkpoint=resnet_checkpoint, limit=2)
    np.testing.assert_array_equal(a.inputs["pixel_values"], b.inputs["pixel_values"])
