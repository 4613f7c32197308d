"""Conformer encoder (Gulati et al. 2020, arXiv:2005.08100), the seed benchmark's ``conformer`` (ByteMLPerf, ONNX).

Inputs (names as in the ByteMLPerf model zoo):

* ``src`` (batch, 3, 64, 512) float: read as NCHW with 3 input channels (static log-mel, delta, delta-delta, the usual
  3-channel speech-feature stack), H = 64 mel bins and W = 512 time frames (10 ms each).
* ``src_pad_mask`` (batch, 128) bool: True = padded frame (the ``key_padding_mask`` convention of torch's
  ``nn.MultiheadAttention`` and ESPnet's ``make_pad_mask``; transformers' ``attention_mask`` is its negation). Entry ``t``
  covers input frames ``4t .. 4t+3`` after the 4x subsampling.

Output: ``memory`` (batch, 128, hidden_size), the encoder output (after the encoder's final LayerNorm).

Architecture:

1. ESPnet ``Conv2dSubsampling``: two 3x3 stride-2 convolutions with ReLU over (mel, time) (padding 1, so 512 frames
   give exactly 128), hidden_size channels each, then the (channel, mel/4) features of each frame flattened and projected to
   hidden_size by a linear layer. Tensor names (ESPnet's): ``encoder.embed.conv.0``, ``encoder.embed.conv.2`` (Conv2d
   weight and bias), ``encoder.embed.out.0`` (Linear, in_features = hidden_size * ceil(ceil(feature_bins/2)/2)).
2. Padded frames set to zero, then ``num_hidden_layers`` Conformer blocks and a final LayerNorm, exactly as transformers'
   ``Wav2Vec2ConformerEncoder`` (tensor names ``encoder.layers.{i}.*`` and ``encoder.layer_norm.*``, as in a saved
   ``Wav2Vec2ConformerModel``): half-step FFN, relative-position multi-head self-attention, convolution module (LayerNorm,
   pointwise conv + GLU, depthwise conv, BatchNorm, activation, pointwise conv), half-step FFN, LayerNorm.

Position embedding: ``relative`` (Transformer-XL relative sinusoidal encoding with the ``pos_bias_u``/``pos_bias_v``
terms), which is what the Conformer paper uses and what ESPnet/WeNet Conformers (the ONNX exports the seed benchmark
draws on) ship; rotary is a wav2vec2-conformer variant that is not in the paper, so it is not implemented.

Padding: padded keys get transformers' additive ``finfo(float32).min`` in attention, and padded frames are zeroed after
the projection, so the content of padded frames never changes the unpadded outputs. As in transformers (and unlike
ESPnet, which masks inside the convolution module), the depthwise convolution does see the padded frames' hidden states,
so the valid outputs depend on how many frames are padded, though not on what those frames contain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from models import arrays, speech
from models.base import (
    cached_params,
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
from models.ops import Ops, contiguous
from models.spec import BUILTIN_TABLES, ModelSpec

_ACTIVATIONS = ("swish", "silu", "gelu")
_BLOCK_LN_EPS = 1e-5  # nn.LayerNorm default: transformers' Conformer block norms do not take config.layer_norm_eps
_BN_EPS = 1e-5  # nn.BatchNorm1d default
# What each size may be (inclusive): wider than any published Conformer, narrow enough that a value outside is a mistake.
CONFIG_RANGES = {
    "hidden_size": (2, 65_536),
    "num_attention_heads": (1, 1_024),
    "intermediate_size": (1, 262_144),
    "conv_depthwise_kernel_size": (1, 1_023),
    "num_hidden_layers": (1, 1_024),
    "layer_norm_eps": (0.0, 1.0),
    "in_channels": (1, 1_024),
    "feature_bins": (1, 8_192),
    "frames": (4, 1_048_576),
}


@dataclass(frozen=True)
class ConformerConfig:
    """Conformer-M of Gulati et al. Table 1 (d 256, 4 heads, 16 blocks, FFN 4 x 256 = 1024, Swish) with ESPnet/WeNet's
    depthwise kernel 31 (the paper's 32 is even; transformers requires an odd kernel for 'same' padding).
    Field names are Wav2Vec2ConformerConfig's, plus the input sizes."""

    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    conv_depthwise_kernel_size: int = 31
    num_hidden_layers: int = 16
    hidden_act: str = "swish"
    position_embeddings_type: str = "relative"
    layer_norm_eps: float = 1e-5  # the encoder's final LayerNorm only, as in transformers
    in_channels: int = 3
    feature_bins: int = 64
    frames: int = 512

    def __post_init__(self):
        check_fields(self, CONFIG_RANGES)
        problems = []
        if self.hidden_size % self.num_attention_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}")
        if self.hidden_size % 2:
            problems.append(f"hidden_size {self.hidden_size} must be even (sinusoidal relative position encoding)")
        if self.conv_depthwise_kernel_size % 2 == 0:
            problems.append(f"conv_depthwise_kernel_size {self.conv_depthwise_kernel_size} must be odd ('same' padding)")
        if self.frames % 4 or self.frames <= 0:
            problems.append(f"frames {self.frames} must be a positive multiple of 4 (4x subsampling)")
        if self.hidden_act not in _ACTIVATIONS:
            problems.append(f"hidden_act {self.hidden_act!r} is not one of {', '.join(_ACTIVATIONS)}")
        if self.position_embeddings_type != "relative":
            problems.append(f"position_embeddings_type {self.position_embeddings_type!r} is not supported (only 'relative')")
        if problems:
            raise ValueError("ConformerConfig: " + "; ".join(problems))

    @property
    def subsampled_frames(self) -> int:
        return self.frames // 4

    @property
    def subsampled_bins(self) -> int:
        return ((self.feature_bins + 1) // 2 + 1) // 2  # ceil(ceil(F / 2) / 2): 3x3 stride 2 padding 1, twice


def parameter_shapes(config: ConformerConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model reads, by checkpoint name."""
    d, f, k = config.hidden_size, config.intermediate_size, config.conv_depthwise_kernel_size
    h = config.num_attention_heads
    shapes = {
        "encoder.embed.conv.0.weight": (d, config.in_channels, 3, 3),
        "encoder.embed.conv.0.bias": (d,),
        "encoder.embed.conv.2.weight": (d, d, 3, 3),
        "encoder.embed.conv.2.bias": (d,),
        "encoder.embed.out.0.weight": (d, d * config.subsampled_bins),
        "encoder.embed.out.0.bias": (d,),
    }
    for i in range(config.num_hidden_layers):
        p = f"encoder.layers.{i}"
        for norm in ("ffn1_layer_norm", "self_attn_layer_norm", "conv_module.layer_norm", "ffn2_layer_norm", "final_layer_norm"):
            shapes[f"{p}.{norm}.weight"] = (d,)
            shapes[f"{p}.{norm}.bias"] = (d,)
        for ffn in ("ffn1", "ffn2"):
            shapes[f"{p}.{ffn}.intermediate_dense.weight"] = (f, d)
            shapes[f"{p}.{ffn}.intermediate_dense.bias"] = (f,)
            shapes[f"{p}.{ffn}.output_dense.weight"] = (d, f)
            shapes[f"{p}.{ffn}.output_dense.bias"] = (d,)
        for proj in ("linear_q", "linear_k", "linear_v", "linear_out"):
            shapes[f"{p}.self_attn.{proj}.weight"] = (d, d)
            shapes[f"{p}.self_attn.{proj}.bias"] = (d,)
        shapes[f"{p}.self_attn.linear_pos.weight"] = (d, d)
        shapes[f"{p}.self_attn.pos_bias_u"] = (h, d // h)
        shapes[f"{p}.self_attn.pos_bias_v"] = (h, d // h)
        shapes[f"{p}.conv_module.pointwise_conv1.weight"] = (2 * d, d, 1)
        shapes[f"{p}.conv_module.depthwise_conv.weight"] = (d, 1, k)
        for stat in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{p}.conv_module.batch_norm.{stat}"] = (d,)
        shapes[f"{p}.conv_module.pointwise_conv2.weight"] = (d, d, 1)
    shapes["encoder.layer_norm.weight"] = (d,)
    shapes["encoder.layer_norm.bias"] = (d,)
    return shapes


def init_params(config: ConformerConfig, seed: int) -> dict[str, np.ndarray]:
    """Seeded weights that keep activations of order 1: weights N(0, 1/fan_in) (He gain for the ReLU convolutions),
    small biases, norm gains near 1, and BatchNorm running statistics near the statistics of the depthwise-conv output
    they normalise (GLU output variance ~0.29 for unit-variance inputs, kept by the N(0, 1/K) depthwise taps)."""
    init = ParamInit(seed)
    params = {}
    for name, shape in parameter_shapes(config).items():
        leaf = name.rsplit(".", 1)[-1]
        if "norm" in name and leaf == "weight":
            params[name] = init.normal(name, shape, 0.1, mean=1.0)
        elif leaf == "running_mean":
            params[name] = init.normal(name, shape, 0.05)
        elif leaf == "running_var":
            params[name] = (0.29 * np.exp(init.normal(name, shape, 0.25))).astype(np.float32)
        elif leaf in ("bias", "pos_bias_u", "pos_bias_v"):
            params[name] = init.normal(name, shape, 0.2 if leaf.startswith("pos_bias") else 0.02)
        elif name.startswith("encoder.embed.conv"):
            params[name] = init.normal(name, shape, math.sqrt(2.0 / math.prod(shape[1:])))
        else:  # linear (out, in), pointwise (out, in, 1), depthwise (d, 1, k): fan_in = product of the trailing axes
            params[name] = init.normal(name, shape, 1.0 / math.sqrt(math.prod(shape[1:])))
    return params


def relative_position_table(length: int, hidden_size: int) -> np.ndarray:
    """(2 * length - 1, hidden_size) sinusoidal encodings of relative positions length-1 .. -(length-1), computed in
    float32 exactly as transformers' ``Wav2Vec2ConformerRelPositionalEmbedding``."""
    position = np.arange(length, dtype=np.float32)[:, None]  # (T, 1)
    div_term = np.exp(np.arange(0, hidden_size, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / hidden_size)))
    angles = position * div_term  # (T, D/2)
    positive = np.empty((length, hidden_size), np.float32)
    negative = np.empty((length, hidden_size), np.float32)
    positive[:, 0::2], positive[:, 1::2] = np.sin(angles), np.cos(angles)
    negative[:, 0::2], negative[:, 1::2] = np.sin(-angles), np.cos(-angles)
    return np.concatenate([positive[::-1], negative[1:]], axis=0)


def _relative_shift(scores: np.ndarray) -> np.ndarray:
    """(B, H, T, 2T-1) scores against relative positions T-1 .. -(T-1) -> (B, H, T, T) with out[i, j] at position i - j
    (the Transformer-XL skew; the same values as transformers' pad-and-reshape): row i is the T entries from offset
    (T - 1) + i * (2T - 2) of the head's flattened scores, taken with a reshape and slices."""
    xp = arrays.namespace(scores)
    b, h, t, r = scores.shape
    if t == 1:
        return scores  # the one relative position, 0
    flat = xp.reshape(scores, (b, h, t * r))[:, :, t - 1: t - 1 + t * (r - 1)]  # (B, H, T (2T - 2))
    return contiguous(xp.reshape(flat, (b, h, t, r - 1))[:, :, :, :t])


class Conformer(Model):
    """Conformer encoder: ``{"src", "src_pad_mask"} -> {"memory"}`` (see the module docstring)."""

    name = "conformer"
    output_names = ("memory",)
    derived = (*Model.derived, "_position_tables")

    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        c = self.config
        return (
            InputSpec("src", (c.in_channels, c.feature_bins, c.frames), "float", "float32"),
            InputSpec("src_pad_mask", (c.subsampled_frames,), "bool", "bool"),
        )

    # -- forward ---------------------------------------------------------------------------------------------------
    def forward(self, inputs, ops: Ops):
        src = ops.input(inputs["src"], name="src")  # (B, C, F, T)
        xp = arrays.namespace(inputs["src_pad_mask"])
        pad_mask = xp.astype(inputs["src_pad_mask"], xp.bool)  # (B, T/4), True = padded
        hidden = self.subsample(src, ops)  # (B, T/4, D)
        return {"memory": self.encode(hidden, pad_mask, ops)}

    def subsample(self, src: np.ndarray, ops: Ops) -> np.ndarray:
        """(B, C, F, T) -> (B, T/4, D): ESPnet Conv2dSubsampling over (mel, time)."""
        p, xp = self.params_like(src), arrays.namespace(src)
        x = ops.conv2d(src, p["encoder.embed.conv.0.weight"], p["encoder.embed.conv.0.bias"], stride=2, padding=1,
                       name="encoder.embed.conv.0")  # (B, D, F/2, T/2)
        x = ops.relu(x, name="encoder.embed.conv.1")
        x = ops.conv2d(x, p["encoder.embed.conv.2.weight"], p["encoder.embed.conv.2.bias"], stride=2, padding=1,
                       name="encoder.embed.conv.2")  # (B, D, F/4, T/4)
        x = ops.relu(x, name="encoder.embed.conv.3")
        b, d, f, t = x.shape
        x = xp.reshape(xp.permute_dims(x, (0, 3, 1, 2)), (b, t, d * f))  # (B, T/4, D * F/4), channel-major as ESPnet's view(b, t, c * f)
        return ops.linear(x, p["encoder.embed.out.0.weight"], p["encoder.embed.out.0.bias"], name="encoder.embed.out.0")

    def encode(self, hidden: np.ndarray, pad_mask: np.ndarray | None, ops: Ops) -> np.ndarray:
        """transformers' ``Wav2Vec2ConformerEncoder.forward`` on (B, T, D) with ``attention_mask = ~pad_mask``."""
        c, p, xp = self.config, self.params_like(hidden), arrays.namespace(hidden)
        attention_bias = None
        if pad_mask is not None:
            zero = arrays.scalar_like(0.0, hidden)
            hidden = xp.where(pad_mask[:, :, None], zero, hidden)  # padded frames output 0 before the blocks
            # (B, 1, 1, T): transformers' additive mask, finfo.min on padded keys
            lowest = arrays.scalar_like(float(np.finfo(np.float32).min), hidden)
            attention_bias = xp.where(pad_mask, lowest, zero)[:, None, None, :]
        positions = arrays.asarray_like(self.position_table(hidden.shape[1]), hidden)
        for i in range(c.num_hidden_layers):
            hidden = self.block(i, hidden, attention_bias, positions, ops)
        return ops.layer_norm(hidden, p["encoder.layer_norm.weight"], p["encoder.layer_norm.bias"], eps=c.layer_norm_eps,
                              name="encoder.layer_norm")

    def position_table(self, length: int) -> np.ndarray:
        """The relative position table of ``length`` frames, made once per length (a derived cache)."""
        tables = self.__dict__.setdefault("_position_tables", {})
        if length not in tables:
            tables[length] = relative_position_table(length, self.config.hidden_size)
        return tables[length]

    def block(self, i: int, x: np.ndarray, attention_bias, positions: np.ndarray, ops: Ops) -> np.ndarray:
        """One ``Wav2Vec2ConformerEncoderLayer`` (eval mode) on (B, T, D); ``attention_bias`` (B, 1, 1, T) or None."""
        p = f"encoder.layers.{i}"
        x = self._half_step_ffn(f"{p}.ffn1", x, ops)
        h = self._layer_norm(f"{p}.self_attn_layer_norm", x, ops)
        x = ops.add(self._self_attention(f"{p}.self_attn", h, attention_bias, positions, ops), x, name=f"{p}.self_attn.residual")
        x = ops.add(x, self._convolution_module(f"{p}.conv_module", x, ops), name=f"{p}.conv_module.residual")
        x = self._half_step_ffn(f"{p}.ffn2", x, ops)
        return self._layer_norm(f"{p}.final_layer_norm", x, ops)

    # -- block parts -----------------------------------------------------------------------------------------------
    def _layer_norm(self, name, x, ops):
        p = self.params_like(x)
        return ops.layer_norm(x, p[f"{name}.weight"], p[f"{name}.bias"], eps=_BLOCK_LN_EPS, name=name)

    def _linear(self, name, x, ops, bias=True):
        p = self.params_like(x)
        weight = p[f"{name}.weight"]
        if weight.ndim == 3:  # a pointwise Conv1d weight (out, in, 1) is a linear layer over channels
            weight = weight[:, :, 0]
        return ops.linear(x, weight, p[f"{name}.bias"] if bias else None, name=name)

    def _activation(self, name, x, ops):
        if self.config.hidden_act == "gelu":
            return ops.gelu(x, name=name)
        return ops.silu(x, name=name)

    def _half_step_ffn(self, name, x, ops):
        """x + 0.5 * FFN(LayerNorm(x)); the norm is ``{block}.ffn1_layer_norm`` next to ``{block}.ffn1``."""
        h = self._layer_norm(f"{name}_layer_norm", x, ops)  # (B, T, D)
        h = self._linear(f"{name}.intermediate_dense", h, ops)  # (B, T, FFN)
        h = self._activation(f"{name}.intermediate_act_fn", h, ops)
        h = self._linear(f"{name}.output_dense", h, ops)  # (B, T, D)
        h = ops.mul(h, np.float32(0.5), name=f"{name}.half_step")
        return ops.add(h, x, name=f"{name}.residual")

    def _self_attention(self, name, x, attention_bias, positions, ops):
        """Relative-position multi-head attention (transformers' eager path) on (B, T, D)."""
        p, xp = self.params_like(x), arrays.namespace(x)
        b, t, d = x.shape
        heads = self.config.num_attention_heads
        dh = d // heads
        scaling = np.float32(dh ** -0.5)

        def split_heads(y):  # (B, T, D) -> (B, H, T, dh), contiguous so that matmul runs as BLAS sgemm
            return contiguous(xp.permute_dims(xp.reshape(y, (b, t, heads, dh)), (0, 2, 1, 3)))

        q = split_heads(self._linear(f"{name}.linear_q", x, ops))
        k = split_heads(self._linear(f"{name}.linear_k", x, ops))
        v = split_heads(self._linear(f"{name}.linear_v", x, ops))
        pos = self._linear(f"{name}.linear_pos", positions, ops, bias=False)  # (2T-1, D)
        pos = contiguous(xp.permute_dims(xp.reshape(pos, (2 * t - 1, heads, dh)), (1, 2, 0)))  # (H, dh, 2T-1)

        q_v = ops.add(q, p[f"{name}.pos_bias_v"][None, :, None, :], name=f"{name}.pos_bias_v")
        position_scores = ops.matmul(q_v, pos[None], name=f"{name}.position_scores")  # (B, H, T, 2T-1)
        position_scores = _relative_shift(position_scores)  # (B, H, T, T), entry (i, j) for relative position i - j
        position_scores = ops.mul(position_scores, scaling, name=f"{name}.position_scores_scaled")

        q_u = ops.add(q, p[f"{name}.pos_bias_u"][None, :, None, :], name=f"{name}.pos_bias_u")
        scores = ops.matmul(q_u, contiguous(xp.permute_dims(k, (0, 1, 3, 2))), name=f"{name}.scores")  # (B, H, T, T)
        scores = ops.mul(scores, scaling, name=f"{name}.scores_scaled")
        scores = ops.add(scores, position_scores, name=f"{name}.position_bias")
        if attention_bias is not None:
            scores = ops.add(scores, attention_bias, name=f"{name}.attention_mask")
        weights = ops.softmax(scores, axis=-1, name=f"{name}.softmax")
        context = ops.matmul(weights, v, name=f"{name}.context")  # (B, H, T, dh)
        context = xp.reshape(xp.permute_dims(context, (0, 2, 1, 3)), (b, t, d))
        return self._linear(f"{name}.linear_out", context, ops)  # (B, T, D)

    def _convolution_module(self, name, x, ops):
        """LayerNorm, pointwise conv + GLU, depthwise conv, BatchNorm, activation, pointwise conv on (B, T, D)."""
        p, xp = self.params_like(x), arrays.namespace(x)
        b, t, d = x.shape
        k = self.config.conv_depthwise_kernel_size
        h = self._layer_norm(f"{name}.layer_norm", x, ops)
        h = self._linear(f"{name}.pointwise_conv1", h, ops, bias=False)  # (B, T, 2D)
        h = ops.glu(h, axis=-1, name=f"{name}.glu")  # (B, T, D)
        h = xp.permute_dims(h, (0, 2, 1))[:, :, None, :]  # (B, D, 1, T)
        h = ops.conv2d(h, xp.reshape(p[f"{name}.depthwise_conv.weight"], (d, 1, 1, k)), padding=(0, (k - 1) // 2), groups=d,
                       name=f"{name}.depthwise_conv")  # (B, D, 1, T)
        h = ops.batch_norm(h, p[f"{name}.batch_norm.running_mean"], p[f"{name}.batch_norm.running_var"],
                           p[f"{name}.batch_norm.weight"], p[f"{name}.batch_norm.bias"], eps=_BN_EPS, axis=1,
                           name=f"{name}.batch_norm")
        h = self._activation(f"{name}.activation", h, ops)
        h = contiguous(xp.permute_dims(h[:, :, 0, :], (0, 2, 1)))  # (B, T, D)
        return self._linear(f"{name}.pointwise_conv2", h, ops, bias=False)

    # -- sample data -----------------------------------------------------------------------------------------------
    def sample_inputs(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        """Padded, normalised log-mel-like features of synthetic utterances (see :func:`models.speech.speech_like`).
        Sample ``i`` depends only on (seed, i), not on the batch size."""
        c = self.config
        return speech.speech_like(batch_size, seed, c.in_channels, c.feature_bins, c.frames)


# -- loading --------------------------------------------------------------------------------------------------------
def config_from_json(data: dict, source: str) -> ConformerConfig:
    """The fields of a ``config.json`` (a Wav2Vec2ConformerConfig's, plus in_channels / feature_bins / frames if present);
    its other keys (Wav2Vec2ConformerConfig has many for the parts this encoder lacks) are ignored, absent fields keep
    their defaults."""
    known = {f.name for f in fields(ConformerConfig)}
    return checkpoint_config(ConformerConfig(), {k: v for k, v in data.items() if k in known}, source)


# The parts of a saved Wav2Vec2ConformerModel this encoder replaces or lacks: wav2vec2's raw-audio front end (its input
# is log-mel features through the Conv2dSubsampling above), the masked-spectrum embedding of pretraining and the
# convolutional position embedding, which transformers' encoder does not apply with relative positions.
_FRONT_END = ("feature_extractor.", "feature_projection.", "encoder.pos_conv_embed.")


def _not_read(name: str) -> str | None:
    """Why a tensor of a Wav2Vec2ConformerModel checkpoint is not read by this encoder, or None."""
    if name.startswith(_FRONT_END) or name == "masked_spec_embed":
        return "a part of Wav2Vec2ConformerModel outside its encoder (front end, pretraining, conv positions)"
    return None


def build_config(**overrides) -> ConformerConfig:
    """The validated config with ``overrides`` (no weights built)."""
    return apply_overrides(ConformerConfig(), overrides)


def host_bytes(config: ConformerConfig, batch: int) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` utterances: the
    first subsampling convolution, the position scores of every head (T x 2T), or the FFN's intermediate)."""
    c = config
    t = c.subsampled_frames
    largest = max(c.hidden_size * ((c.feature_bins + 1) // 2) * ((c.frames + 1) // 2),
                  c.num_attention_heads * t * (2 * t - 1), t * c.intermediate_size, c.in_channels * c.feature_bins * c.frames)
    return parameter_bytes(parameter_shapes(c)), 4 * batch * largest



def assemble(config, params):
    """The model of ``config`` with seeded weights that a store kept (:func:`models.load_model`), checked to be
    exactly its tensors (a CheckpointError otherwise)."""
    return Conformer(config, cached_params(params, parameter_shapes(config), "conformer (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> Conformer:
    """Seeded Conformer-M, or the tensors of a checkpoint directory (``config.json`` + ``model.safetensors``; every
    tensor used unless ``allow_unused``, see :func:`models.base.take_params`)."""
    if checkpoint is None:
        config = apply_overrides(ConformerConfig(), overrides)
        check_parameter_memory(parameter_shapes(config), "conformer (seeded weights)")
        return Conformer(config, init_params(config, seed))
    data, tensors = read_checkpoint(checkpoint)
    source = f"conformer checkpoint {str(checkpoint)!r}"
    config = apply_overrides(config_from_json(data, source), overrides)
    return Conformer(config, take_params(tensors, parameter_shapes(config), source, allow_unused=allow_unused,
                                         ignorable=_not_read))


__all__ = ["Conformer", "ConformerConfig", "load", "parameter_shapes", "init_params", "relative_position_table"]


# No task of its own: the tensor metrics (SNR, cosine) of the encoder output judge it; its data has no labels.
SPEC = ModelSpec(
    name="conformer", module=__name__, model_class="Conformer", param_shapes="parameter_shapes",
    primary_output="memory", dataset_format="conformance.datasets.speech", checkpoint_type="wav2vec2-conformer",
    tables=BUILTIN_TABLES / "conformer")
