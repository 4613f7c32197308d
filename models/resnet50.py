"""ResNet-50 v1.5 image classifier (He et al. 2016; v1.5 as in torchvision and ``microsoft/resnet-50``).

Inputs: ``pixel_values`` (batch, 3, 224, 224) float, NCHW, ImageNet mean/std normalised. Output: ``logits`` (batch, 1000).
Parameter names and the config follow transformers' ``ResNetForImageClassification`` / ``ResNetConfig``, so a
``save_pretrained`` directory of that class loads as is. v1.5: in the first bottleneck of a downsampling stage the stride 2
sits in the 3x3 conv (``layer.1``), not in the first 1x1 conv (``layer.0``) as in the original v1.

Every conv, BatchNorm (inference, running statistics), ReLU, max pool, residual add, the global average pool and the
classifier go through the hardware's ops, each named by its checkpoint parameter prefix. The stem conv, which the seed
benchmark keeps in FP16 when running FP8, is :data:`STEM_CONV`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.base import (
    CheckpointError,
    InputSpec,
    Model,
    ParamInit,
    apply_overrides,
    checkpoint_config,
    read_checkpoint,
    take_params,
)
from models.ops import Ops

STEM_CONV = "resnet.embedder.embedder.convolution"
"""The first (7x7, stride 2) downsampling conv on the raw pixels."""

BN_EPS = 1e-5  # torch.nn.BatchNorm2d default, used by transformers' ResNetConvLayer and ResNetShortCut
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # ImageNet preprocessing of torchvision / microsoft/resnet-50
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


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
        object.__setattr__(self, "hidden_sizes", tuple(int(v) for v in self.hidden_sizes))
        object.__setattr__(self, "depths", tuple(int(v) for v in self.depths))
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
        p = self.params
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
        logits = ops.linear(x, self.params["classifier.1.weight"], self.params["classifier.1.bias"], name="classifier.1")
        return {"logits": logits}                                                   # (B, 1000)

    def sample_inputs(self, batch_size: int, seed: int = 0):
        rng = np.random.default_rng([seed, 0x52455336])  # stream tag "RES6": distinct from the weight streams
        return {"pixel_values": natural_images(batch_size, self.config.image_size, rng, self.config.num_channels)}


def natural_images(batch: int, size: int, rng: np.random.Generator, channels: int = 3) -> np.ndarray:
    """Images with natural-image statistics, ImageNet-normalised: (batch, channels, size, size) float32.

    Each image is a Gaussian random field with a 1/f^a amplitude spectrum (a ~ U(0.9, 1.4), natural images ~1.0-1.2)
    in a luminance and two weaker opponent-colour channels, mixed to strongly correlated RGB, given a random contrast
    and brightness near ImageNet's channel means, clipped to [0, 1] (a few saturated pixels, as in photos), then
    normalised with ImageNet mean/std.
    """
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.rfftfreq(size)[None, :]
    radius = np.sqrt(fx * fx + fy * fy)
    radius[0, 0] = 1.0
    alpha = rng.uniform(0.9, 1.4, size=(batch, 1, 1, 1))
    amplitude = radius[None, None] ** -alpha
    amplitude[..., 0, 0] = 0.0  # zero-mean field; brightness set below
    spectrum = amplitude * (rng.standard_normal((batch, 3) + radius.shape) + 1j * rng.standard_normal((batch, 3) + radius.shape))
    field = np.fft.irfft2(spectrum, s=(size, size), axes=(-2, -1))
    field /= field.std(axis=(-2, -1), keepdims=True)
    # luminance, red-green, blue-yellow (opponent channels carry less variance than luminance) -> RGB
    opponent = field * np.array([1.0, 0.3, 0.2])[None, :, None, None]
    to_rgb = np.array([[1.0, 0.6, -0.3], [1.0, -0.5, -0.3], [1.0, 0.0, 0.8]])
    rgb = np.einsum("rk,bkhw->brhw", to_rgb, opponent)
    contrast = rng.uniform(0.1, 0.25, size=(batch, 1, 1, 1))
    # brightness around ImageNet's channel means, with a per-image tint
    brightness = (IMAGENET_MEAN[None, :, None, None] + rng.uniform(-0.15, 0.15, size=(batch, 1, 1, 1))
                  + rng.normal(0, 0.04, size=(batch, 3, 1, 1)))
    img = np.clip(brightness + contrast * rgb, 0.0, 1.0).astype(np.float32)
    if channels != 3:
        img = np.repeat(img.mean(axis=1, keepdims=True), channels, axis=1)
        return ((img - 0.45) / 0.226).astype(np.float32)
    return ((img - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]).astype(np.float32)


# -- seeded weights -----------------------------------------------------------------------------------------------------
_CALIBRATION_IMAGES = 4
_LOGIT_STD = 2.5  # spread of logits across classes of a trained ResNet-50 on ImageNet is ~2-3 (top-1 logit ~10-15)


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


def seeded_params(config: ResNetConfig, seed: int) -> dict[str, np.ndarray]:
    """Weights that behave like a trained network's in scale, deterministic in ``seed``.

    - convs: He (Kaiming) normal, fan_in, std sqrt(2 / fan_in);
    - BN affine: gamma ~ U(0.7, 1.3), beta ~ N(-0.3, 0.2^2) before a ReLU (~60% of activations are then zero, as
      commonly in trained CNNs; with beta ~ 0 pooled features are less image-specific and 8-bit rounding noise flips
      more top-1s); the last BN of each residual branch has gamma ~ U(0.2, 0.5), beta ~ N(0, 0.1^2) (trained ResNets
      learn small ones there; it keeps the residual stream order 1 over 3-6 blocks);
    - BN running statistics: measured on 4 generated images (a forward pass with batch statistics, what BN training
      converges to), so every normalised activation is order 1 on natural-image-like inputs;
    - classifier: normal rows, the bias cancels the mean pooled feature of the calibration images (pooled features of
      different images share most of their direction; uncentred, one class would win for every image), and the whole
      is scaled so that logits spread with std 2.5 across classes on those images (a trained ResNet-50's spread is
      ~2-3; on other sample images it is ~1-4). Top-1 then varies between images (10 classes in 16 images) and its
      margin over the runner-up (median ~0.4) is well above what FP16 rounding does to the logits (~0.01).
    """
    init = ParamInit(seed)
    params = {}
    for name, shape in param_shapes(config).items():
        if name.endswith("convolution.weight"):
            fan_in = shape[1] * shape[2] * shape[3]
            params[name] = init.normal(name, shape, std=float(np.sqrt(2.0 / fan_in)))
        elif name.endswith("normalization.weight"):
            low, high = (0.2, 0.5) if ".layer.2." in name else (0.7, 1.3)
            params[name] = init.uniform(name, shape, low, high)
        elif name.endswith("normalization.bias"):
            before_relu = ".layer.2." not in name and "shortcut" not in name
            params[name] = init.normal(name, shape, std=0.2, mean=-0.3) if before_relu else init.normal(name, shape, std=0.1)
        elif name.endswith("running_mean"):
            params[name] = init.constant(shape, 0.0)
        elif name.endswith("running_var"):
            params[name] = init.constant(shape, 1.0)
    d = config.hidden_sizes[-1]
    params["classifier.1.weight"] = init.normal("classifier.1.weight", (config.num_labels, d), std=1.0)
    params["classifier.1.bias"] = init.constant((config.num_labels,), 0.0)

    model = ResNet50(config, params)
    rng = np.random.default_rng([seed, 0x424E4341])  # "BNCA": calibration images, disjoint from sample_inputs streams
    images = natural_images(_CALIBRATION_IMAGES, config.image_size, rng, config.num_channels)
    pooled_features = {}

    def keep_pooled(name, y):
        if name == "resnet.pooler":
            pooled_features[name] = y

    model.forward({"pixel_values": images}, _BatchStatsOps(params, recorder=keep_pooled))
    pooled = pooled_features["resnet.pooler"].astype(np.float64)  # (n, d)
    w = params["classifier.1.weight"].astype(np.float64)
    centred_logits = (pooled - pooled.mean(axis=0)) @ w.T
    w *= _LOGIT_STD / centred_logits.std()
    params["classifier.1.weight"] = w.astype(np.float32)
    params["classifier.1.bias"] = (-(w @ pooled.mean(axis=0))).astype(np.float32)
    return params


# -- loading --------------------------------------------------------------------------------------------------------------
def _config_from_checkpoint(raw: dict, source: str) -> dict:
    """ResNetConfig fields from a transformers ``config.json``; unsupported variants are a CheckpointError."""
    if raw.get("model_type", "resnet") != "resnet":
        raise CheckpointError(f"{source}: model_type is {raw.get('model_type')!r}, expected 'resnet'")
    for key, wanted in (("layer_type", "bottleneck"), ("hidden_act", "relu"), ("downsample_in_bottleneck", False)):
        if raw.get(key, wanted) != wanted:
            raise CheckpointError(f"{source}: {key} is {raw[key]!r}; ResNet-50 v1.5 needs {wanted!r}")
    fields = {k: raw[k] for k in ("num_channels", "embedding_size", "downsample_in_first_stage") if k in raw}
    for key in ("hidden_sizes", "depths"):
        if key in raw:
            fields[key] = tuple(int(v) for v in raw[key])
    if "num_labels" in raw:
        fields["num_labels"] = int(raw["num_labels"])
    elif "id2label" in raw:
        fields["num_labels"] = len(raw["id2label"])
    return fields


def load(checkpoint=None, seed: int = 0, **overrides) -> ResNet50:
    """Seeded weights at the ResNet-50 size, or a ``ResNetForImageClassification`` ``save_pretrained`` directory
    (config sizes from its ``config.json``; ``overrides`` apply on top, e.g. ``image_size``)."""
    if checkpoint is None:
        config = apply_overrides(ResNetConfig(), overrides)
        return ResNet50(config, seeded_params(config, seed))
    raw, tensors = read_checkpoint(checkpoint)
    source = f"resnet50 checkpoint {str(checkpoint)!r}"
    config = apply_overrides(checkpoint_config(ResNetConfig(), _config_from_checkpoint(raw, source), source), overrides)
    return ResNet50(config, take_params(tensors, param_shapes(config), source))
