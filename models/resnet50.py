"""ResNet-50 v1.5 image classifier (He et al. 2016; v1.5 as in torchvision and ``microsoft/resnet-50``).

Inputs: ``pixel_values`` (batch, 3, 224, 224) float, NCHW, ImageNet mean/std normalised. Output: ``logits`` (batch, 1000).
Parameter names and the config follow transformers' ``ResNetForImageClassification`` / ``ResNetConfig``, so a
``save_pretrained`` directory of that class loads as is. v1.5: in the first bottleneck of a downsampling stage the stride 2
sits in the 3x3 conv (``layer.1``), not in the first 1x1 conv (``layer.0``) as in the original v1.

Every conv, BatchNorm (inference, running statistics), ReLU, max pool, residual add, the global average pool and the
classifier go through the hardware's ops, each named by its checkpoint parameter prefix. The stem conv (which PopRT's
ResNet-50 example keeps in FP16 when running FP8) is :data:`STEM_CONV`.

Seeded weights solve a synthetic task: :data:`PROTOTYPES` classes of natural-looking images (:func:`class_samples`),
a random trained-scale backbone and a classifier fitted to the classes in closed form (:func:`seeded_params`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.base import (
    cached_params,
    CheckpointError,
    InputSpec,
    Model,
    ParamInit,
    apply_overrides,
    check_fields,
    check_parameter_memory,
    checkpoint_config,
    parameter_bytes,
    read_checkpoint,
    take_params,
)
from models.ops import Ops
from models.spec import BUILTIN_TABLES, ModelSpec

STEM_CONV = "resnet.embedder.embedder.convolution"
"""The first (7x7, stride 2) downsampling conv on the raw pixels."""

BN_EPS = 1e-5  # torch.nn.BatchNorm2d default, used by transformers' ResNetConvLayer and ResNetShortCut
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # ImageNet preprocessing of torchvision / microsoft/resnet-50
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


# What each size may be (inclusive; for the stage lists, each entry and how many stages): wider than any published
# ResNet, narrow enough that a value outside is a mistake. The memory the parameters take is checked when they are built.
CONFIG_RANGES = {
    "num_channels": (1, 1_024),
    "embedding_size": (1, 65_536),
    "hidden_sizes": (4, 65_536),
    "depths": (1, 1_024),
    "num_labels": (1, 1_000_000),
    "image_size": (1, 8_192),
}
CONFIG_LENGTHS = {"hidden_sizes": (1, 16), "depths": (1, 16)}


@dataclass(frozen=True)
class ResNetConfig:
    """Defaults: ResNet-50 as transformers' ``ResNetConfig()`` / ``microsoft/resnet-50`` (the seed benchmark's
    resnet50-v1.5, ImageNet 1000 classes at 224x224). Field names as in ``ResNetConfig``; ``image_size`` is ours
    (ResNet is size-agnostic; it sets the input spec)."""

    num_channels: int = 3
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    layer_type: str = "bottleneck"
    downsample_in_first_stage: bool = False
    num_labels: int = 1000
    image_size: int = 224

    def __post_init__(self):
        check_fields(self, CONFIG_RANGES, CONFIG_LENGTHS)
        if self.layer_type != "bottleneck":
            raise ValueError(f"ResNetConfig: layer_type must be 'bottleneck' (ResNet-50), got {self.layer_type!r}")
        if len(self.hidden_sizes) != len(self.depths) or not self.depths:
            raise ValueError(f"ResNetConfig: hidden_sizes {self.hidden_sizes} and depths {self.depths} "
                             "must have the same non-zero length")
        if any(h % 4 for h in self.hidden_sizes):
            raise ValueError(f"ResNetConfig: hidden_sizes {self.hidden_sizes} must be multiples of 4 (bottleneck reduction 4)")


def _stage_strides(config: ResNetConfig) -> list[int]:
    return [2 if config.downsample_in_first_stage else 1] + [2] * (len(config.depths) - 1)


def _layers(config: ResNetConfig):
    """(prefix, in_channels, out_channels, stride) of every bottleneck layer, in order."""
    in_ch = config.embedding_size
    for s, (out_ch, depth, stride) in enumerate(zip(config.hidden_sizes, config.depths, _stage_strides(config))):
        for m in range(depth):
            yield f"resnet.encoder.stages.{s}.layers.{m}", in_ch, out_ch, stride if m == 0 else 1
            in_ch = out_ch


def _needs_shortcut(in_ch: int, out_ch: int, stride: int) -> bool:
    return in_ch != out_ch or stride != 1  # as ResNetBottleNeckLayer: a projection only where the shape changes


def _conv_bn_shapes(prefix: str, out_ch: int, in_ch: int, k: int) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.convolution.weight": (out_ch, in_ch, k, k)}
    for p in ("weight", "bias", "running_mean", "running_var"):
        shapes[f"{prefix}.normalization.{p}"] = (out_ch,)
    return shapes


def param_shapes(config: ResNetConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter, as in ``ResNetForImageClassification.state_dict()`` (minus num_batches_tracked)."""
    shapes = _conv_bn_shapes("resnet.embedder.embedder", config.embedding_size, config.num_channels, 7)
    for prefix, in_ch, out_ch, stride in _layers(config):
        mid = out_ch // 4
        if _needs_shortcut(in_ch, out_ch, stride):
            shapes.update(_conv_bn_shapes(f"{prefix}.shortcut", out_ch, in_ch, 1))
        shapes.update(_conv_bn_shapes(f"{prefix}.layer.0", mid, in_ch, 1))
        shapes.update(_conv_bn_shapes(f"{prefix}.layer.1", mid, mid, 3))
        shapes.update(_conv_bn_shapes(f"{prefix}.layer.2", out_ch, mid, 1))
    shapes["classifier.1.weight"] = (config.num_labels, config.hidden_sizes[-1])
    shapes["classifier.1.bias"] = (config.num_labels,)
    return shapes


class ResNet50(Model):
    name = "resnet50"
    output_names = ("logits",)

    @property
    def input_specs(self):
        c = self.config
        return (InputSpec("pixel_values", (c.num_channels, c.image_size, c.image_size), "float", "float32"),)

    def _conv_bn(self, x, prefix, ops: Ops, *, stride=1, relu=True):
        p = self.params_like(x)
        w = p[f"{prefix}.convolution.weight"]
        x = ops.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2, name=f"{prefix}.convolution")
        x = ops.batch_norm(x, p[f"{prefix}.normalization.running_mean"], p[f"{prefix}.normalization.running_var"],
                           p[f"{prefix}.normalization.weight"], p[f"{prefix}.normalization.bias"],
                           eps=BN_EPS, name=f"{prefix}.normalization")
        return ops.relu(x, name=f"{prefix}.activation") if relu else x

    def _bottleneck(self, x, prefix, in_ch, out_ch, stride, ops: Ops):
        # x: (B, in_ch, H, W) -> (B, out_ch, H/stride, W/stride)
        h = self._conv_bn(x, f"{prefix}.layer.0", ops)                            # 1x1 reduce: (B, out/4, H, W)
        h = self._conv_bn(h, f"{prefix}.layer.1", ops, stride=stride)             # v1.5: stride 2 in the 3x3 conv
        h = self._conv_bn(h, f"{prefix}.layer.2", ops, relu=False)                # 1x1 expand: (B, out, H/s, W/s)
        if _needs_shortcut(in_ch, out_ch, stride):
            x = self._conv_bn(x, f"{prefix}.shortcut", ops, stride=stride, relu=False)  # 1x1 projection, strided
        h = ops.add(h, x, name=f"{prefix}.residual")
        return ops.relu(h, name=f"{prefix}.activation")

    def forward(self, inputs, ops: Ops):
        x = ops.input(inputs["pixel_values"], name="pixel_values")                  # (B, 3, 224, 224)
        x = self._conv_bn(x, "resnet.embedder.embedder", ops, stride=2)             # 7x7/2 stem: (B, 64, 112, 112)
        x = ops.max_pool2d(x, kernel=3, stride=2, padding=1, name="resnet.embedder.pooler")  # (B, 64, 56, 56)
        for prefix, in_ch, out_ch, stride in _layers(self.config):
            x = self._bottleneck(x, prefix, in_ch, out_ch, stride, ops)             # ... -> (B, 2048, 7, 7)
        x = ops.mean(x, axis=(2, 3), name="resnet.pooler")                          # (B, 2048)
        p = self.params_like(x)
        logits = ops.linear(x, p["classifier.1.weight"], p["classifier.1.bias"], name="classifier.1")
        return {"logits": logits}                                                   # (B, 1000)

    def sample_inputs(self, batch_size: int, seed: int = 0):
        """Images of the classes the seeded classifier was built to tell apart (:func:`class_samples`), as an
        evaluation set shows the classes a trained one learnt."""
        return {"pixel_values": class_samples(batch_size, self.config, _sample_stream(seed))[0]}

    def sample_labels(self, batch_size: int, seed: int = 0):
        """The label of each image of :meth:`sample_inputs`: its class's (:func:`prototype_classes` of the weights'
        seed), which the seeded classifier was fitted to; None for a checkpoint's classifier, which was not."""
        labels = None if self.weight_seed is None else prototype_classes(self.config, self.weight_seed)
        if labels is None or len(labels) < PROTOTYPES:
            return None
        return labels[draw_classes(batch_size, _sample_stream(seed))]


IMAGE_CHUNK = 32
"""Synthetic images made at a time (:func:`raw_natural_images`)."""


def natural_images(batch: int, size: int, rng: np.random.Generator, channels: int = 3) -> np.ndarray:
    """Images with natural-image statistics, ImageNet-normalised: (batch, channels, size, size) float32
    (:func:`raw_natural_images` normalised with :func:`normalise`)."""
    return normalise(raw_natural_images(batch, size, rng), channels)


@dataclass(frozen=True)
class ImageStatistics:
    """What sets an image's look in :func:`raw_natural_images`, per image: the spectral slope ``alpha`` (amplitude
    ~ 1/f^alpha), the ``contrast``, and the per-channel ``brightness`` (batch, 3)."""

    alpha: np.ndarray
    contrast: np.ndarray
    brightness: np.ndarray

    @classmethod
    def draw(cls, batch: int, rng: np.random.Generator) -> ImageStatistics:
        """Natural images' range: alpha ~ U(0.9, 1.4) (natural images ~1.0-1.2), contrast ~ U(0.1, 0.25), brightness
        around ImageNet's channel means with a per-image level and tint."""
        alpha = rng.uniform(0.9, 1.4, size=batch)
        contrast = rng.uniform(0.1, 0.25, size=batch)
        brightness = (IMAGENET_MEAN[None, :] + rng.uniform(-0.15, 0.15, size=(batch, 1))
                      + rng.normal(0, 0.04, size=(batch, 3)))
        return cls(alpha, contrast, brightness)

    def take(self, index: np.ndarray) -> ImageStatistics:
        return ImageStatistics(self.alpha[index], self.contrast[index], self.brightness[index])


def raw_natural_images(batch: int, size: int, rng: np.random.Generator,
                       statistics: ImageStatistics | None = None) -> np.ndarray:
    """RGB images in [0, 1] with natural-image statistics: (batch, 3, size, size) float32.

    Each image is a Gaussian random field with a 1/f^alpha amplitude spectrum in a luminance and two weaker
    opponent-colour channels, mixed to strongly correlated RGB, given a contrast and a brightness, clipped to [0, 1]
    (a few saturated pixels, as in photos). ``statistics`` (default: drawn, :meth:`ImageStatistics.draw`) sets
    alpha, contrast and brightness per image; the field itself is always new.

    The images are made :data:`IMAGE_CHUNK` at a time (their spectra and fields are float64, 16 times the image's
    bytes: a release profile's 2048 images took 15 GB at once); the real parts of all the spectra come from the
    stream before the imaginary parts, so a second generator starts where the real parts end, and ``rng`` ends where
    one draw of the whole batch leaves it: the same images and the same stream, whatever the chunk.
    """
    if statistics is None:
        statistics = ImageStatistics.draw(batch, rng)
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    radius = np.sqrt(fx * fx + fy * fy)
    radius[0, 0] = 1.0
    shape = (3,) + radius.shape
    imaginary = np.random.Generator(type(rng.bit_generator)())
    imaginary.bit_generator.state = rng.bit_generator.state
    for start in range(0, batch, IMAGE_CHUNK):  # past the real parts
        imaginary.standard_normal((min(IMAGE_CHUNK, batch - start),) + shape)
    # luminance, red-green, blue-yellow (opponent channels carry less variance than luminance) -> RGB
    opponent_scale = np.array([1.0, 0.3, 0.2])[None, :, None, None]
    to_rgb = np.array([[1.0, 0.6, -0.3], [1.0, -0.5, -0.3], [1.0, 0.0, 0.8]])
    images = np.empty((batch, 3, size, size), np.float32)
    for start in range(0, batch, IMAGE_CHUNK):
        part = slice(start, min(start + IMAGE_CHUNK, batch))
        count = part.stop - start
        amplitude = radius[None, None] ** -statistics.alpha[part, None, None, None]
        amplitude[..., 0, 0] = 0.0  # zero-mean field; brightness set below
        real = rng.standard_normal((count,) + shape)
        spectrum = amplitude * (real + 1j * imaginary.standard_normal((count,) + shape))
        field = np.fft.irfft2(spectrum, s=(size, size), axes=(-2, -1))
        field /= field.std(axis=(-2, -1), keepdims=True)
        rgb = np.einsum("rk,bkhw->brhw", to_rgb, field * opponent_scale)
        img = statistics.brightness[part, :, None, None] + statistics.contrast[part, None, None, None] * rgb
        images[part] = np.clip(img, 0.0, 1.0)
    rng.bit_generator.state = imaginary.bit_generator.state
    return images


def normalise(rgb: np.ndarray, channels: int = 3) -> np.ndarray:
    """ImageNet mean/std normalisation of RGB images in [0, 1]; grey (mean of RGB) for ``channels != 3``. Computed in
    float64 :data:`IMAGE_CHUNK` images at a time, each rounded to float32 once."""
    out = np.empty((rgb.shape[0], channels) + rgb.shape[2:], np.float32)
    for start in range(0, rgb.shape[0], IMAGE_CHUNK):
        part = rgb[start:start + IMAGE_CHUNK]
        if channels != 3:
            grey = np.repeat(part.mean(axis=1, keepdims=True), channels, axis=1)
            out[start:start + IMAGE_CHUNK] = (grey - 0.45) / 0.226
        else:
            out[start:start + IMAGE_CHUNK] = (part - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]
    return out


# -- the synthetic task: image classes and their samples -----------------------------------------------------------------
PROTOTYPES = 16
"""Image classes the seeded classifier is built to tell apart (the rest of its rows blend these)."""
_CLASS_ALPHAS = (0.95, 1.35)  # spectral slopes of the classes (natural images ~1.0-1.2)
_CLASS_CONTRASTS = (0.12, 0.24)
_CLASS_TINTS = ((0.0, 0.0, 0.0), (0.06, 0.0, -0.06), (-0.06, 0.0, 0.06), (0.0, 0.06, -0.03))  # neutral, warm, cool, green
_SAMPLE_JITTER = (0.03, 0.05, 0.02)  # per-sample spread of alpha, relative contrast, brightness per channel


def class_statistics() -> ImageStatistics:
    """The image statistics of the :data:`PROTOTYPES` classes: every combination of two spectral slopes, two contrasts
    and four colour casts, at ImageNet's mean brightness. A class is a kind of image (as "sand" or "foliage" are), not
    one picture: every sample of it is a new image with these statistics."""
    grid = [(a, c, t) for a in _CLASS_ALPHAS for c in _CLASS_CONTRASTS for t in _CLASS_TINTS]
    return ImageStatistics(np.array([g[0] for g in grid]), np.array([g[1] for g in grid]),
                           IMAGENET_MEAN[None, :] + np.array([g[2] for g in grid]))


def _sample_stream(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, 0x52455336])  # stream tag "RES6": distinct from the weight streams


def draw_classes(batch: int, rng: np.random.Generator) -> np.ndarray:
    """The classes of ``batch`` images, uniform over the :data:`PROTOTYPES`: the first draw of :func:`class_samples`."""
    return rng.integers(0, PROTOTYPES, size=batch)


def class_samples(batch: int, config: ResNetConfig, rng: np.random.Generator,
                  classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` ImageNet-normalised images and the class each shows (``classes``, default drawn uniformly): each a
    new random field with its class's statistics, jittered per sample by :data:`_SAMPLE_JITTER`."""
    if classes is None:
        classes = draw_classes(batch, rng)
    base = class_statistics().take(classes)
    jitter_alpha, jitter_contrast, jitter_brightness = _SAMPLE_JITTER
    statistics = ImageStatistics(base.alpha + rng.normal(0.0, jitter_alpha, batch),
                                 base.contrast * (1.0 + rng.normal(0.0, jitter_contrast, batch)),
                                 base.brightness + rng.normal(0.0, jitter_brightness, (batch, 3)))
    images = raw_natural_images(batch, config.image_size, rng, statistics)
    return normalise(images, config.num_channels), classes


# -- seeded weights -----------------------------------------------------------------------------------------------------
_TOP_LOGIT = 12.0  # a trained ResNet-50's top-1 logit on ImageNet is ~10-15
_BLEND = (0.2, 0.6)  # share of a class row in a blended label's row (the rest: another class row and noise)
# Scale of the last BatchNorm of each residual branch. Trained ResNets learn small ones (and recipes start them at 0);
# with U(0.2, 0.5) the random branches amplified rounding noise stage after stage (FP8 layer SNR 22 -> 15 -> 10 -> 6 dB
# over the four stages, pooled features 19.6 dB); with U(0.05, 0.15) it stays at 24 -> 20 -> 17 -> 15 dB (24.5 dB).
_BRANCH_GAMMA = (0.05, 0.15)
_RIDGE = 1.0  # ridge of the classifier's least-squares fit, relative to the mean squared norm of the class features


class _BatchStatsOps(Ops):
    """FP32 ops whose BatchNorm measures the batch statistics of its input and stores them as the layer's running
    statistics (what BN training converges to), then normalises with them."""

    def __init__(self, params, recorder=None):
        super().__init__(recorder)
        self.params = params

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        per_channel = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)  # (C, N*H*W)
        mean = per_channel.mean(axis=1)
        var = np.square(per_channel - mean[:, None]).mean(axis=1)
        self.params[f"{name}.running_mean"] = mean
        self.params[f"{name}.running_var"] = var
        return super().batch_norm(x, mean, var, gamma, beta, eps=eps, axis=axis, name=name)


def prototype_classes(config: ResNetConfig, seed: int) -> np.ndarray:
    """The label of each image class (distinct, spread over the labels, deterministic in ``seed``)."""
    rng = np.random.default_rng([seed, 0x434C4153])  # "CLAS"
    return np.sort(rng.choice(config.num_labels, size=min(PROTOTYPES, config.num_labels), replace=False))


def seeded_params(config: ResNetConfig, seed: int) -> dict[str, np.ndarray]:
    """Weights that behave like a trained network's in scale and in the decisions they make, deterministic in ``seed``.

    Backbone (random, trained-like scale):

    - convs: He (Kaiming) normal, fan_in, std sqrt(2 / fan_in);
    - BN affine: gamma ~ U(0.7, 1.3), beta ~ N(-0.3, 0.2^2) before a ReLU (~60% of activations are then zero, as
      commonly in trained CNNs); the last BN of each residual branch has gamma ~ U(0.05, 0.15), beta ~ N(0, 0.1^2)
      (trained ResNets learn small ones there: the identity path carries the signal and the branches refine it, so
      rounding noise is not amplified block after block; see :data:`_BRANCH_GAMMA`);
    - BN running statistics: the batch statistics of one image of each of the :data:`PROTOTYPES` classes
      (:func:`class_samples`; a forward pass with batch statistics, what BN training converges to), so every
      normalised activation is order 1 on such images.

    Classifier: fitted in closed form to the classes, as a trained one is fitted to its task. With ``C`` the pooled
    features of those images centred on their mean ``m`` (one row per class) and ``G = C C^T``, the rows of the
    classes' labels (:func:`prototype_classes`) are ``(G + lambda I)^-1 C`` (ridge least squares onto the one-hot
    labels, ``lambda`` = :data:`_RIDGE` x the mean of diag(G)): each row answers to what sets its class apart, not to
    what all images share. Every other label's row blends two class rows (one with weight U(0.2, 0.6)) with a random
    direction of the same norm, as related classes share features. Logits are ``scale * row . (feature - m)``, the
    scale putting a class image's own logit at ~12 (a trained ResNet-50's top-1 logit is ~10-15).

    A random 1000-way head instead puts the top two logits a quarter of the logit spread apart (the expected gap of
    the top two of n normal values), and rounding noise reorders them; this one keeps a class's samples apart from the
    other classes by margins that FP16 and FP8 noise do not reach (its top-1 agreement gates pass at fp16 and fp8).
    """
    init = ParamInit(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        if name.endswith("convolution.weight"):
            fan_in = shape[1] * shape[2] * shape[3]
            params[name] = init.normal(name, shape, std=float(np.sqrt(2.0 / fan_in)))
        elif name.endswith("normalization.weight"):
            low, high = _BRANCH_GAMMA if ".layer.2." in name else (0.7, 1.3)
            params[name] = init.uniform(name, shape, low, high)
        elif name.endswith("normalization.bias"):
            before_relu = ".layer.2." not in name and "shortcut" not in name
            params[name] = init.normal(name, shape, std=0.2, mean=-0.3) if before_relu else init.normal(name, shape, std=0.1)
        elif name.endswith("running_mean"):
            params[name] = init.constant(shape, 0.0)
        elif name.endswith("running_var"):
            params[name] = init.constant(shape, 1.0)
    d, n = config.hidden_sizes[-1], config.num_labels
    params["classifier.1.weight"] = init.constant((n, d), 0.0)
    params["classifier.1.bias"] = init.constant((n,), 0.0)

    model = ResNet50(config, params)
    rng = np.random.default_rng([seed, 0x424E4341])  # "BNCA": the fitting images, disjoint from sample_inputs streams
    images, _ = class_samples(PROTOTYPES, config, rng, classes=np.arange(PROTOTYPES))
    pooled_features = {}

    def keep_pooled(name, y):
        if name == "resnet.pooler":
            pooled_features[name] = y

    model.forward({"pixel_values": images}, _BatchStatsOps(params, recorder=keep_pooled))
    pooled = pooled_features["resnet.pooler"].astype(np.float64)  # (PROTOTYPES, d)
    mean = pooled.mean(axis=0)
    centred = pooled - mean
    gram = centred @ centred.T
    class_rows = np.linalg.solve(gram + _RIDGE * np.trace(gram) / len(gram) * np.eye(len(gram)), centred)  # (P, d)

    labels = prototype_classes(config, seed)
    head = np.random.default_rng([seed, 0x48454144])  # "HEAD"
    k = len(labels)
    first = head.integers(0, k, size=n)
    second = (first + head.integers(1, max(k, 2), size=n)) % k
    share = head.uniform(*_BLEND, size=(n, 1))
    noise = head.standard_normal((n, d))
    noise *= np.median(np.linalg.norm(class_rows, axis=1)) / np.linalg.norm(noise, axis=1, keepdims=True)
    rows = share * class_rows[first] + (1.0 - share) * 0.5 * (class_rows[second] + noise)
    rows[labels] = class_rows[:k]
    scale = _TOP_LOGIT / float(np.median(np.einsum("kd,kd->k", class_rows, centred)))
    w = scale * rows
    params["classifier.1.weight"] = w.astype(np.float32)
    params["classifier.1.bias"] = (-(w @ mean)).astype(np.float32)
    return params


# config.json of a transformers checkpoint without num_labels or id2label: PretrainedConfig's default.
TRANSFORMERS_DEFAULT_LABELS = 2


# -- loading --------------------------------------------------------------------------------------------------------------
def _config_from_checkpoint(raw: dict, source: str) -> dict:
    """ResNetConfig fields from a transformers ``config.json``; unsupported variants are a CheckpointError (values of
    the wrong type or range are refused by the config itself, never converted)."""
    if raw.get("model_type", "resnet") != "resnet":
        raise CheckpointError(f"{source}: model_type is {raw.get('model_type')!r}, expected 'resnet'")
    for key, wanted in (("layer_type", "bottleneck"), ("hidden_act", "relu"), ("downsample_in_bottleneck", False)):
        if raw.get(key, wanted) != wanted:
            raise CheckpointError(f"{source}: {key} is {raw[key]!r}; ResNet-50 v1.5 needs {wanted!r}")
    fields = {k: raw[k] for k in ("num_channels", "embedding_size", "downsample_in_first_stage", "hidden_sizes",
                                  "depths") if k in raw}
    if "num_labels" in raw:
        fields["num_labels"] = raw["num_labels"]
    elif "id2label" in raw:
        if not isinstance(raw["id2label"], dict):
            raise CheckpointError(f"{source}: config.json id2label is {type(raw['id2label']).__name__}, expected an "
                                  "object of class names")
        fields["num_labels"] = len(raw["id2label"])
    else:  # transformers leaves both out of config.json when the labels are its default, two
        fields["num_labels"] = TRANSFORMERS_DEFAULT_LABELS
    return fields


def build_config(**overrides) -> ResNetConfig:
    """The validated config with ``overrides`` (no weights built)."""
    return apply_overrides(ResNetConfig(), overrides)


def host_bytes(config: ResNetConfig, batch: int) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` images: the input,
    the stem's convolution, or a bottleneck layer's output)."""
    c = config
    side = -(-c.image_size // 2)
    largest = max(c.num_channels * c.image_size ** 2, c.embedding_size * side * side)
    side = -(-side // 2)
    for _, _, out_ch, stride in _layers(c):
        side = -(-side // stride)
        largest = max(largest, out_ch * side * side)
    return parameter_bytes(param_shapes(c)), 4 * batch * largest



def assemble(config, params):
    """The model of ``config`` with seeded weights that a store kept (:func:`models.load_model`), checked to be
    exactly its tensors (a CheckpointError otherwise)."""
    return ResNet50(config, cached_params(params, param_shapes(config), "resnet50 (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> ResNet50:
    """Seeded weights at the ResNet-50 size, or a ``ResNetForImageClassification`` ``save_pretrained`` directory
    (config sizes from its ``config.json``; ``overrides`` apply on top, e.g. ``image_size``; every tensor used unless
    ``allow_unused``, see :func:`models.base.take_params`)."""
    if checkpoint is None:
        config = apply_overrides(ResNetConfig(), overrides)
        check_parameter_memory(param_shapes(config), "resnet50 (seeded weights)")
        return ResNet50(config, seeded_params(config, seed))
    raw, tensors = read_checkpoint(checkpoint)
    source = f"resnet50 checkpoint {str(checkpoint)!r}"
    config = apply_overrides(checkpoint_config(ResNetConfig(), _config_from_checkpoint(raw, source), source), overrides)
    return ResNet50(config, take_params(tensors, param_shapes(config), source, allow_unused=allow_unused))


SPEC = ModelSpec(
    name="resnet50", module=__name__, model_class="ResNet50", primary_output="logits",
    task_metrics=("top1_agreement", "top5_agreement"),
    task_scorer="conformance.accuracy.metrics:classification_agreement",
    label_metrics=("top1_accuracy", "top5_accuracy"), dataset_format="conformance.datasets.images",
    streamed_dataset=True, checkpoint_type="resnet", aliases=("resnet50-v1.5",),
    tables=BUILTIN_TABLES / "resnet50")
