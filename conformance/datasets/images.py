"""An ImageNet-style validation folder for resnet50: ``val_map.txt`` (MLPerf's layout, ``<file> <label>`` per line,
the label an int class index, files relative to the folder) and the images it lists.

Preprocessing follows the checkpoint's ``preprocessor_config.json`` when there is one (transformers' ConvNeXt and ViT
image processors, as ResNet checkpoints such as ``microsoft/resnet-50`` ship them, computed as their Pillow backend
does), else MLPerf's ResNet-50 reference: shorter side resized to 256 (bilinear), centre crop 224 (the model's
``image_size``), scaled to [0, 1], ImageNet mean/std normalised. Both give NCHW float32 ``pixel_values``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from boundedio import JSON_CONFIG_LIMIT, MIB, load_json, open_regular, read_text
from conformance.accuracy.metrics import MetricError, mean_metric
from conformance.datasets.base import (
    MAX_LIST_BYTES,
    DatasetError,
    EvaluationSet,
    check_input_size,
    sha256_files,
)
from conformance.distributed.source import BatchSource

VAL_MAP = "val_map.txt"
PREPROCESSOR_CONFIG = "preprocessor_config.json"
MLPERF_CROP_FRACTION = 0.875  # 224 of 256: MLPerf's ResNet-50 resizes the shorter side to image_size / 0.875
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_STANDARD_MEAN = (0.5, 0.5, 0.5)  # transformers' defaults of the ConvNeXt and ViT processors
IMAGENET_STANDARD_STD = (0.5, 0.5, 0.5)
RESAMPLE_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}  # PIL's codes
# Processor families (image_processor_type / feature_extractor_type without a Fast/Pil suffix) and their defaults.
PROCESSOR_DEFAULTS = {
    "ConvNext": {"size": {"shortest_edge": 384}, "crop_pct": 224 / 256, "resample": 3,
                 "image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD},
    "ViT": {"size": {"height": 224, "width": 224}, "resample": 2,
            "image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD},
}
_SETTING_KEYS = {"do_resize", "size", "crop_pct", "resample", "do_center_crop", "crop_size", "do_rescale",
                 "rescale_factor", "do_normalize", "image_mean", "image_std"}
# Keys that name or describe the processor without changing its output (images are always converted to RGB).
_DESCRIPTIVE_KEYS = {"image_processor_type", "feature_extractor_type", "processor_class", "do_convert_rgb"}
_NAMED = 5  # an error about many files names this many, then counts the rest
_LABEL = re.compile(r"[+-]?[0-9]{1,18}")
# Bounds of one image: its file, its pixels as its header declares them (checked before it is decoded), and its
# pixels after the resize (checked before it is resized; a 1 x 4000 strip resized to a shortest edge of 256 would be
# 256 x 1,024,000). ImageNet's largest validation images are a few tens of megapixels at most.
MAX_IMAGE_FILE_BYTES = 256 * MIB
MAX_IMAGE_PIXELS = 64 * 1024 * 1024
# Pillow modes read with more than 8 bits per channel, and the largest value of each (scaled to 0..255 when decoded).
_WIDE_MODES = {"I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535}


@dataclass(frozen=True)
class ImagePreprocessing:
    """What turns a decoded RGB image into one ``pixel_values`` row, in transformers' order: resize (the shorter side
    to ``shortest_edge`` keeping the aspect ratio, the longer side truncated to an int, or to exactly ``height`` x
    ``width``), centre crop (offsets rounded down, zero padding where the image is smaller), rescale, normalise."""

    source: str
    resize: dict[str, int] | None  # {"shortest_edge": N} or {"height": H, "width": W}; None: no resizing
    resample: int
    crop: tuple[int, int] | None  # (height, width)
    rescale_factor: float | None
    image_mean: tuple[float, ...] | None
    image_std: tuple[float, ...] | None
    processor_type: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "image_processor_type": self.processor_type,
            "decode": "Pillow; 16-bit grayscale scaled to 8 bits; convert('RGB')",
            "resize": dict(self.resize) if self.resize else None,
            "resample": RESAMPLE_NAMES[self.resample],
            "center_crop": list(self.crop) if self.crop else None,
            "rescale_factor": self.rescale_factor,
            "image_mean": list(self.image_mean) if self.image_mean else None,
            "image_std": list(self.image_std) if self.image_std else None,
            "layout": "NCHW float32",
        }

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of an image of ``width`` x ``height`` after the resize (the same without one)."""
        if self.resize is None:
            return width, height
        if "shortest_edge" in self.resize:
            short, long = sorted((height, width))
            new_short = self.resize["shortest_edge"]
            new_long = int(new_short * long / short)
            return (new_short, new_long) if width <= height else (new_long, new_short)
        return self.resize["width"], self.resize["height"]

    def __call__(self, image: Image.Image) -> np.ndarray:
        """(3, H, W) float32 of an RGB Pillow image."""
        if self.resize is not None:
            image = image.resize(self.resized_size(*image.size), resample=self.resample)
        pixels = np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)  # (3, H, W)
        if self.crop is not None:
            pixels = center_crop(pixels, *self.crop)
        if self.rescale_factor is not None:
            x = (pixels.astype(np.float64) * self.rescale_factor).astype(np.float32)
        else:
            x = pixels.astype(np.float32)
        if self.image_mean is not None:
            mean = np.asarray(self.image_mean, np.float32)[:, None, None]
            std = np.asarray(self.image_std, np.float32)[:, None, None]
            x = (x - mean) / std
        return x


def center_crop(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """The centred ``height`` x ``width`` window of (C, H, W) ``pixels`` (top/left offsets rounded down); where the
    image is smaller it is first padded with zeros, centred (the extra row or column of an odd pad at the bottom or
    right), as transformers' ``center_crop`` does."""
    _, h, w = pixels.shape
    pad_h, pad_w = max(height - h, 0), max(width - w, 0)
    if pad_h or pad_w:
        top, left = (pad_h + 1) // 2, (pad_w + 1) // 2
        pixels = np.pad(pixels, ((0, 0), (top, pad_h - top), (left, pad_w - left)))
        _, h, w = pixels.shape
    top, left = (h - height) // 2, (w - width) // 2
    return pixels[:, top:top + height, left:left + width]


def mlperf_preprocessing(image_size: int) -> ImagePreprocessing:
    """MLPerf's ResNet-50 reference preprocessing at ``image_size``: shorter side to int(image_size / 0.875)
    (256 at 224) bilinear, centre crop, [0, 1], ImageNet mean/std."""
    return ImagePreprocessing(
        source="MLPerf ResNet-50 reference (no preprocessor_config.json in the checkpoint)",
        resize={"shortest_edge": int(image_size / MLPERF_CROP_FRACTION)}, resample=2, crop=(image_size, image_size),
        rescale_factor=1 / 255, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)


def _size_dict(value, key: str, family: str, where: str) -> dict[str, int]:
    """A ``size``/``crop_size`` setting as a dict, as transformers reads it (an int is the shortest edge for ConvNeXt's
    ``size``, a square otherwise)."""
    shortest_only = family == "ConvNext" and key == "size"  # ConvNeXt's resize takes nothing else
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"shortest_edge": value} if shortest_only else {"height": value, "width": value}
    allowed = [{"shortest_edge"}] if shortest_only else [{"height", "width"}]
    if key == "size" and not shortest_only:
        allowed.append({"shortest_edge"})
    if not isinstance(value, dict) or set(value) not in allowed:
        wanted = " or ".join("{" + ", ".join(f"'{k}': N" for k in sorted(keys)) + "}" for keys in allowed)
        raise DatasetError(f"{where}: {key} {value!r} is not supported for {family} processors; "
                           f"expected an int or {wanted}")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DatasetError(f"{where}: {key}.{k} must be a positive int, got {v!r}")
    return dict(value)


def _triple(value, key: str, where: str) -> tuple[float, float, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise DatasetError(f"{where}: {key} must be a number or a list of 3 numbers (RGB), got {value!r}")
    if key == "image_std" and any(v <= 0 for v in value):
        raise DatasetError(f"{where}: image_std must be positive, got {value!r}")
    return tuple(float(v) for v in value)


def processor_preprocessing(path: Path) -> ImagePreprocessing:
    """The preprocessing a ``preprocessor_config.json`` describes, for the ConvNeXt and ViT image processors (their
    Pillow backend); any other processor type or a setting these do not have is a DatasetError."""
    where = str(path)
    config = load_json(path, "a preprocessor_config.json", JSON_CONFIG_LIMIT, DatasetError)
    if not isinstance(config, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(config).__name__}")
    declared = config.get("image_processor_type") or config.get("feature_extractor_type")
    family = None
    if isinstance(declared, str):
        family = re.sub(r"(ImageProcessor(Fast|Pil)?|FeatureExtractor)$", "", declared)
    if family not in PROCESSOR_DEFAULTS:
        supported = ", ".join(f"{f}ImageProcessor" for f in PROCESSOR_DEFAULTS)
        raise DatasetError(f"{where}: image_processor_type {declared!r} is not supported; supported: {supported} "
                           "(and their FeatureExtractor, Fast and Pil names)")
    unknown = sorted(k for k in config if k not in _SETTING_KEYS | _DESCRIPTIVE_KEYS and not k.startswith("_")
                     and not (k == "do_pad" and config[k] is False)
                     and not (k == "data_format" and config[k] == "channels_first")
                     or (k == "crop_pct" and family != "ConvNext"))
    if unknown:
        raise DatasetError(f"{where}: setting(s) {unknown} are not supported for {declared}; supported: "
                           f"{', '.join(sorted(_SETTING_KEYS))}")
    given = {k: v for k, v in config.items() if k in _SETTING_KEYS and v is not None}
    settings = {**PROCESSOR_DEFAULTS[family], **given}
    for flag in ("do_resize", "do_center_crop", "do_rescale", "do_normalize"):
        if not isinstance(settings.get(flag, False), bool):
            raise DatasetError(f"{where}: {flag} must be true or false, got {settings[flag]!r}")
    resample = settings["resample"]
    if isinstance(resample, bool) or resample not in RESAMPLE_NAMES:
        raise DatasetError(f"{where}: resample {resample!r} is not one of Pillow's filters "
                           f"{', '.join(f'{k} ({v})' for k, v in RESAMPLE_NAMES.items())}")

    resize, crop = None, None
    if settings.get("do_resize", True):
        size = _size_dict(settings["size"], "size", family, where)
        if family == "ConvNext":
            crop_pct = settings["crop_pct"]
            if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 < crop_pct:
                raise DatasetError(f"{where}: crop_pct must be a positive number, got {crop_pct!r}")
            edge = size["shortest_edge"]
            if edge < 384:  # ConvNeXt: resize to edge / crop_pct, crop edge x edge; from 384 on it warps to a square
                resize, crop = {"shortest_edge": int(edge / crop_pct)}, (edge, edge)
            else:
                resize = {"height": edge, "width": edge}
        else:
            resize = size
    if settings.get("do_center_crop", False):
        if "crop_size" not in settings:
            raise DatasetError(f"{where}: do_center_crop is true but there is no crop_size")
        crop_size = _size_dict(settings["crop_size"], "crop_size", family, where)
        if crop is not None:  # ConvNeXt's own crop, then this one
            raise DatasetError(f"{where}: do_center_crop after ConvNeXt's crop_pct crop is not supported")
        crop = (crop_size["height"], crop_size["width"])
    rescale_factor = None
    if settings.get("do_rescale", True):
        rescale_factor = settings.get("rescale_factor", 1 / 255)
        if isinstance(rescale_factor, bool) or not isinstance(rescale_factor, (int, float)):
            raise DatasetError(f"{where}: rescale_factor must be a number, got {rescale_factor!r}")
        rescale_factor = float(rescale_factor)
    mean = std = None
    if settings.get("do_normalize", True):
        mean = _triple(settings["image_mean"], "image_mean", where)
        std = _triple(settings["image_std"], "image_std", where)
    return ImagePreprocessing(source=f"the checkpoint's {PREPROCESSOR_CONFIG}", resize=resize, resample=int(resample),
                              crop=crop, rescale_factor=rescale_factor, image_mean=mean, image_std=std,
                              processor_type=declared)


def output_size(preprocessing: ImagePreprocessing) -> tuple[int, int] | None:
    """(height, width) every image comes out at, or None when it depends on the image (no resize to a fixed size and
    no crop)."""
    if preprocessing.crop is not None:
        return preprocessing.crop
    if preprocessing.resize is not None and "height" in preprocessing.resize:
        return preprocessing.resize["height"], preprocessing.resize["width"]
    return None


def read_val_map(path: Path, limit: int | None) -> list[tuple[int, str, int]]:
    """(line number, file name, label) of the first ``limit`` entries of a val_map.txt (a regular file of at most
    :data:`MAX_LIST_BYTES`, UTF-8); blank lines are skipped. Each file name is relative to the folder: an absolute name
    or a ``..`` part is refused naming its line (symbolic links that lead out of the folder are refused by
    :func:`check_inside` before a file is opened)."""
    text = read_text(path, "a val_map.txt", MAX_LIST_BYTES, DatasetError)
    entries = []
    for number, line in enumerate(text.split("\n"), 1):
        if limit is not None and len(entries) >= limit:
            break
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            shown = line.strip() if len(line.strip()) <= 80 else line.strip()[:77] + "..."
            raise DatasetError(f"{path}:{number}: {len(fields)} field(s) in {shown!r}; expected '<file> <label>'")
        name, label = fields
        if not _LABEL.fullmatch(label):
            raise DatasetError(f"{path}:{number}: label {label!r} of {name!r} is not an int class index")
        _check_relative(path, number, name)
        entries.append((number, name, int(label)))
    if not entries:
        raise DatasetError(f"{path}: no entries; expected '<file> <label>' lines")
    return entries


def _check_relative(val_map: Path, number: int, name: str) -> None:
    """A DatasetError naming the line when the file ``name`` is absolute or has a ``..`` part."""
    parts = name.replace("\\", "/").split("/")
    reason = None
    if Path(name).is_absolute() or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        reason = "an absolute path"
    elif ".." in parts:
        reason = "a '..' part"
    if reason:
        raise DatasetError(f"{val_map}:{number}: {name!r} is {reason}; the files of a val_map.txt are named "
                           f"relative to its folder {str(val_map.parent)!r} and read only from inside it")


def check_inside(val_map: Path, number: int, name: str, folder: Path) -> None:
    """A DatasetError naming the line when the file ``name`` of ``folder`` resolves outside it (its symbolic links
    lead elsewhere)."""
    try:
        inside = (folder / name).resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symbolic link loop
        inside = False
    if not inside:
        raise DatasetError(f"{val_map}:{number}: {name!r} is a symbolic link (or in one) that leads out of the folder "
                           f"{str(folder)!r}; the files of a val_map.txt are read only from inside its folder")


def image_header(path: Path, preprocessing: ImagePreprocessing | None = None) -> tuple[int, int]:
    """The width and height the header of the image file ``path`` declares, checked against the bounds of
    :func:`decode_image` without decoding its pixels."""
    with open_regular(path, "an image file", MAX_IMAGE_FILE_BYTES, DatasetError) as handle:
        with _opened(handle, path, preprocessing) as image:
            return image.size


def _opened(handle, path: Path, preprocessing: ImagePreprocessing | None) -> Image.Image:
    """The Pillow image of ``handle`` (not yet decoded), its declared size and resized size within the bounds."""
    try:
        image = Image.open(handle)
    except Image.DecompressionBombError as exc:  # Pillow's own bound, checked on the header as ours is
        raise DatasetError(f"{path.name!r}: {exc}") from None
    width, height = image.size
    if width * height > MAX_IMAGE_PIXELS:
        image.close()
        raise DatasetError(f"{path.name!r}: its header declares {width} x {height} pixels, more than the "
                           f"{MAX_IMAGE_PIXELS:,} an image may have here")
    if preprocessing is not None:
        new_width, new_height = preprocessing.resized_size(width, height)
        if new_width * new_height > MAX_IMAGE_PIXELS:
            image.close()
            raise DatasetError(f"{path.name!r}: {width} x {height} pixels resize to {new_width} x "
                               f"{new_height}, more than the {MAX_IMAGE_PIXELS:,} an image may have here (an "
                               "extreme aspect ratio)")
    return image


def decode_image(path: Path, preprocessing: ImagePreprocessing | None = None) -> Image.Image:
    """The RGB Pillow image of the file ``path``, bounded and with its bit depth honoured.

    The file is a regular file of at most :data:`MAX_IMAGE_FILE_BYTES`; its width x height, read from its header, is
    checked against :data:`MAX_IMAGE_PIXELS` before it is decoded, and so is its size after ``preprocessing``'s resize.
    A 16-bit grayscale image is scaled to 8 bits (value x 255 / 65535, rounded), not clipped to white by Pillow's
    ``convert``; an image of 32-bit integer or float pixels, whose scale is unknown, is refused. Other modes convert as
    Pillow converts them (palette, bilevel, CMYK, alpha dropped). A DatasetError names the limit or mode; Pillow's own
    errors (not an image, truncated) are left to the caller."""
    with open_regular(path, "an image file", MAX_IMAGE_FILE_BYTES, DatasetError) as handle:
        with _opened(handle, path, preprocessing) as image:
            return to_rgb(image, path.name)


def to_rgb(image: Image.Image, name: str) -> Image.Image:
    """``image`` as 8-bit RGB, with its bit depth honoured (see :func:`decode_image`)."""
    mode = image.mode
    top = _WIDE_MODES.get(mode)
    if top is None and mode == "I" and image.format == "PNG":
        top = 65535  # Pillow may read a 16-bit grayscale PNG as 32-bit "I": its values are 16-bit
    if top is not None:
        values = np.asarray(image).astype(np.int64)
        if values.min(initial=0) < 0 or values.max(initial=0) > top:
            raise DatasetError(f"{name!r}: {mode} pixels outside [0, {top}]")
        gray = ((values * 255 + top // 2) // top).astype(np.uint8)
        return Image.fromarray(gray, "L").convert("RGB")
    if mode in ("I", "F") or mode.startswith("I;"):
        raise DatasetError(f"{name!r}: {mode} pixels ({'float' if mode == 'F' else '32-bit integer'}) have no "
                           "known scale to 8 bits; convert the image to 8- or 16-bit")
    return image.convert("RGB")


def _first_few(items: list[str]) -> str:
    """The first :data:`_NAMED` of ``items`` and how many more there are."""
    more = len(items) - _NAMED
    return "; ".join(items[:_NAMED]) + (f"; and {more} more" if more > 0 else "")


def label_scorer(labels: np.ndarray):
    """Outputs -> top-1 and top-5 accuracy against ``labels`` (one class index per image), per image."""
    labels = np.asarray(labels, np.int64)

    def scorer(outputs: dict[str, np.ndarray]):
        logits = outputs["logits"]
        return {"top1_accuracy": mean_metric(topk_label_hits(logits, labels, 1)),
                "top5_accuracy": mean_metric(topk_label_hits(logits, labels, 5))}
    return scorer


def topk_label_hits(logits, labels, k: int) -> np.ndarray:
    """Per image: whether its label is among the ``k`` largest logits."""
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    if logits.ndim != 2 or len(logits) != len(labels):
        raise MetricError(f"logits have shape {logits.shape}; expected ({len(labels)}, classes)")
    k = min(k, logits.shape[1])
    if k == 1:
        return np.argmax(logits, axis=1) == labels
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return np.any(top == labels[:, None], axis=1)


class ImageSource(BatchSource):
    """The ``pixel_values`` of the images a ``val_map.txt`` lists, decoded and preprocessed per batch: a row's pixels
    are the same bits whichever batch reads them. A file that cannot be decoded is a DatasetError naming it and its
    line."""

    def __init__(self, val_map: Path, folder: Path, entries: list[tuple[int, str, int]],
                 preprocessing: ImagePreprocessing, size: tuple[int, int]):
        self.val_map, self.folder, self.entries = val_map, folder, entries
        self.preprocessing, self.size = preprocessing, size

    @property
    def rows(self) -> int:
        return len(self.entries)

    @property
    def row_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {"pixel_values": ((3, *self.size), np.dtype(np.float32))}

    def check_headers(self) -> None:
        """Every image opens as an image within the bounds (:func:`image_header`), before any model runs; a
        DatasetError names those that do not."""
        unreadable = []
        for number, name, _ in self.entries:
            try:
                image_header(self.folder / name, self.preprocessing)
            except DatasetError as exc:
                raise DatasetError(f"{self.val_map}:{number}: {exc}") from None
            except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
                unreadable.append(f"{name!r} ({self.val_map.name}:{number}: {exc})")
        if unreadable:
            raise DatasetError(f"{self.folder}: {len(unreadable)} image(s) Pillow cannot decode: "
                               f"{_first_few(unreadable)}")

    def take(self, start: int, stop: int) -> dict[str, np.ndarray]:
        pixel_values = np.empty((stop - start, 3) + self.size, np.float32)
        undecodable = []
        for row, (number, name, _) in enumerate(self.entries[start:stop]):
            try:
                rgb = decode_image(self.folder / name, self.preprocessing)
            except DatasetError as exc:
                raise DatasetError(f"{self.val_map}:{number}: {exc}") from None
            except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:
                undecodable.append(f"{name!r} ({self.val_map.name}:{number}: {exc})")
                continue
            x = self.preprocessing(rgb)
            if x.shape[1:] != self.size:
                raise DatasetError(f"{self.val_map}:{number}: {name!r} comes out of the preprocessing at "
                                   f"{x.shape[1]}x{x.shape[2]}; the model takes {self.size[0]}x{self.size[1]}")
            pixel_values[row] = x
        if undecodable:
            raise DatasetError(f"{self.folder}: {len(undecodable)} image(s) Pillow cannot decode: "
                               f"{_first_few(undecodable)}")
        return {"pixel_values": pixel_values}


def load(path, model, checkpoint=None, limit: int | None = None, stream: bool = False) -> EvaluationSet:
    """The images of ``path`` (a folder holding val_map.txt, or the val_map.txt itself) as ``pixel_values``, with
    top-1/top-5 accuracy against their labels; with ``stream``, an :class:`ImageSource` that decodes the images of
    each batch when it is run (every image's header checked up front), else the pixels of every image."""
    path = Path(path)
    folder, val_map = (path, path / VAL_MAP) if path.is_dir() else (path.parent, path)
    if not val_map.exists():
        raise DatasetError(f"{path}: no {VAL_MAP} (expected '<file> <label>' lines, files relative to the folder)")
    config = model.config
    if config.num_channels != 3:
        raise DatasetError(f"{val_map}: images are decoded as RGB; the model takes {config.num_channels} channels")

    preprocessor = Path(checkpoint) / PREPROCESSOR_CONFIG if checkpoint is not None else None
    if preprocessor is not None and preprocessor.exists():
        preprocessing, settings_from = processor_preprocessing(preprocessor), str(preprocessor)
    else:
        preprocessing, settings_from = mlperf_preprocessing(config.image_size), "MLPerf's preprocessing"
    expected = (config.image_size, config.image_size)
    size = output_size(preprocessing)
    if size is not None and size != expected:
        raise DatasetError(f"{settings_from}: gives {size[0]}x{size[1]} images; the model takes "
                           f"{expected[0]}x{expected[1]} (its image_size)")

    entries = read_val_map(val_map, limit)
    for number, name, label in entries:
        if not 0 <= label < config.num_labels:
            raise DatasetError(f"{val_map}:{number}: label {label} of {name!r} is outside the model's classes "
                               f"[0, {config.num_labels})")
    if not stream:
        check_input_size(val_map, len(entries), 3 * expected[0] * expected[1] * 4, "images", model.name)
    files = [folder / name for _, name, _ in entries]
    for number, name, _ in entries:
        check_inside(val_map, number, name, folder)
    missing = [f"{val_map.name}:{number} {name!r}"
               for (number, name, _), file in zip(entries, files) if not file.exists()]
    if missing:
        raise DatasetError(f"{val_map}: {len(missing)} listed file(s) not found in {folder}: {_first_few(missing)}")

    source = ImageSource(val_map, folder, entries, preprocessing, expected)
    if stream:
        source.check_headers()
        inputs = source
    else:
        inputs = source.take(0, len(entries))

    labels = np.array([label for _, _, label in entries], np.int64)
    provenance = {
        "format": "imagenet-val-map",
        "path": str(path),
        "sha256": sha256_files([val_map, *files]),
        "units": len(entries),
        "rows": len(entries),
        "labels": f"{len(np.unique(labels))} distinct of {config.num_labels} classes",
        "preprocessing": preprocessing.describe(),
    }
    return EvaluationSet(model=model.name, inputs=inputs, units=len(entries),
                         provenance=provenance, scorer=label_scorer(labels))
