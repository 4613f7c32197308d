"""The pieces BERT, ALBERT and RoFormer share: embeddings, the extended attention mask, multi-head self-attention, the
post-LayerNorm encoder layer, the config fields with their validation and strict ``config.json`` reader
(:class:`TransformerConfig`), and seeded weights that behave like trained ones.

All three are post-LN transformer encoders (``x = LN(x + attn(x)); x = LN(x + ffn(x))``) that differ in parameter names,
in the embeddings (ALBERT factorises them, RoFormer has no position table) and in the position encoding (RoFormer rotates
queries and keys). Every precision-sensitive step calls ``ops`` with the dotted checkpoint prefix of its layer; exact
rearrangements (head split/merge, rotary pair swap, mask construction) stay here, in the array namespace of the inputs
(:mod:`models.arrays`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, get_type_hints

import numpy as np

from models import arrays
from models.base import CheckpointError, InputError, InputSpec, ParamInit, apply_overrides, check_fields
from models.ops import FP32, contiguous

# transformers' hidden_act names -> the GELU form (ACT2FN: "gelu" is the erf form, "gelu_new" the tanh approximation).
GELU_FORMS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}

# Added to the attention scores of padded keys, as in transformers' extended attention mask (torch.finfo(float32).min).
MASK_VALUE = np.float32(np.finfo(np.float32).min)


def activation(ops, x, hidden_act: str, *, name: str):
    return ops.gelu(x, approximate=GELU_FORMS[hidden_act], name=name)


def extended_attention_mask(attention_mask: np.ndarray) -> np.ndarray:
    """(B, S) 1 = attend / 0 = padding -> (B, 1, 1, S) float32 to add to the scores: 0 or MASK_VALUE (exact, no ops)."""
    xp = arrays.namespace(attention_mask)
    return xp.where(attention_mask[:, None, None, :] != 0, arrays.scalar_like(0.0, attention_mask),
                    arrays.scalar_like(float(MASK_VALUE), attention_mask))


def embeddings(ops, params, prefix: str, input_ids, token_type_ids, *, eps: float, positions: bool = True):
    """word + token_type (+ position) embeddings, then LayerNorm, as transformers' ``BertEmbeddings``: (B, S, E)."""
    seq_len = input_ids.shape[1]
    x = ops.embedding(params[f"{prefix}.word_embeddings.weight"], input_ids, name=f"{prefix}.word_embeddings")  # (B, S, E)
    types = ops.embedding(params[f"{prefix}.token_type_embeddings.weight"], token_type_ids, name=f"{prefix}.token_type_embeddings")
    x = ops.add(x, types, name=f"{prefix}.add_token_type")  # (B, S, E)
    if positions:
        table = params[f"{prefix}.position_embeddings.weight"]
        positions_ids = arrays.asarray_like(np.arange(seq_len), input_ids)
        pos = ops.embedding(table, positions_ids, name=f"{prefix}.position_embeddings")  # (S, E)
        x = ops.add(x, pos, name=f"{prefix}.add_position")  # (B, S, E)
    return layer_norm(ops, params, f"{prefix}.LayerNorm", x, eps)


def linear(ops, params, name: str, x):
    return ops.linear(x, params[f"{name}.weight"], params[f"{name}.bias"], name=name)


def layer_norm(ops, params, name: str, x, eps: float):
    return ops.layer_norm(x, params[f"{name}.weight"], params[f"{name}.bias"], eps=eps, name=name)


@dataclass(frozen=True)
class LayerNames:
    """Checkpoint prefixes of one post-LN encoder layer (BERT/RoFormer spelling by default; ALBERT renames them)."""

    query: str = "attention.self.query"
    key: str = "attention.self.key"
    value: str = "attention.self.value"
    attention_output: str = "attention.output.dense"
    attention_norm: str = "attention.output.LayerNorm"
    intermediate: str = "intermediate.dense"
    output: str = "output.dense"
    output_norm: str = "output.LayerNorm"

    def linears(self) -> tuple[str, ...]:
        return (self.query, self.key, self.value, self.attention_output, self.intermediate, self.output)

    def shapes(self, prefix: str, hidden: int, intermediate: int) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape for the layer at ``prefix`` (linear weights are (out, in) as in torch)."""
        io = {self.query: (hidden, hidden), self.key: (hidden, hidden), self.value: (hidden, hidden),
              self.attention_output: (hidden, hidden), self.intermediate: (intermediate, hidden),
              self.output: (hidden, intermediate)}
        shapes = {}
        for layer, (out_features, in_features) in io.items():
            shapes[f"{prefix}.{layer}.weight"] = (out_features, in_features)
            shapes[f"{prefix}.{layer}.bias"] = (out_features,)
        for norm in (self.attention_norm, self.output_norm):
            shapes[f"{prefix}.{norm}.weight"] = (hidden,)
            shapes[f"{prefix}.{norm}.bias"] = (hidden,)
        return shapes


BERT_LAYER = LayerNames()

Rotate = Callable[[object, np.ndarray, str], np.ndarray]


def self_attention(ops, params, prefix: str, names: LayerNames, x, mask, num_heads: int, rotate: Rotate | None = None):
    """Multi-head self-attention of transformers' eager path: softmax(q k^T / sqrt(d) + mask) v, heads merged: (B, S, H).

    The 1/sqrt(d) scale is applied to the queries (an exact power of two for d = 64, so identical to scaling the scores);
    ``rotate(ops, t, name)`` applies a position rotation to queries and keys (RoFormer)."""
    xp = arrays.namespace(x)
    batch, seq_len, hidden = x.shape
    head_dim = hidden // num_heads
    attn = prefix + "." + names.query.rsplit(".", 1)[0]  # e.g. bert.encoder.layer.3.attention.self

    def heads(t):  # (B, S, H) -> (B, nh, S, d), a strided view
        return xp.permute_dims(xp.reshape(t, (batch, seq_len, num_heads, head_dim)), (0, 2, 1, 3))

    q = heads(linear(ops, params, f"{prefix}.{names.query}", x))  # (B, nh, S, d)
    k = heads(linear(ops, params, f"{prefix}.{names.key}", x))  # (B, nh, S, d)
    v = heads(linear(ops, params, f"{prefix}.{names.value}", x))  # (B, nh, S, d)
    if rotate is not None:
        q = rotate(ops, q, f"{prefix}.{names.query}.rotary")  # (B, nh, S, d)
        k = rotate(ops, k, f"{prefix}.{names.key}.rotary")  # (B, nh, S, d)
    q = ops.mul(q, np.float32(1.0 / np.sqrt(head_dim)), name=f"{attn}.scale")  # (B, nh, S, d)
    k_t = xp.permute_dims(contiguous(k), (0, 1, 3, 2))  # (B, nh, d, S); numpy's matmul is ~10x slower on the strided view
    scores = ops.matmul(q, k_t, name=f"{attn}.scores")  # (B, nh, S, S)
    scores = ops.add(scores, mask, name=f"{attn}.mask")  # (B, nh, S, S) + (B, 1, 1, S)
    probs = ops.softmax(scores, axis=-1, name=f"{attn}.probs")  # (B, nh, S, S)
    context = ops.matmul(probs, v, name=f"{attn}.context")  # (B, nh, S, d)
    return xp.reshape(xp.permute_dims(context, (0, 2, 1, 3)), (batch, seq_len, hidden))  # (B, S, H)


def encoder_layer(ops, params, prefix: str, names: LayerNames, x, mask, *, num_heads: int, hidden_act: str,
                  eps: float, rotate: Rotate | None = None):
    """One post-LN layer: x = LN(x + W_o attn(x)); x = LN(x + W_2 act(W_1 x)). (B, S, H) -> (B, S, H)."""
    context = self_attention(ops, params, prefix, names, x, mask, num_heads, rotate)  # (B, S, H)
    attended = linear(ops, params, f"{prefix}.{names.attention_output}", context)  # (B, S, H)
    attended = ops.add(attended, x, name=f"{prefix}.{names.attention_output}.residual")
    x = layer_norm(ops, params, f"{prefix}.{names.attention_norm}", attended, eps)  # (B, S, H)
    hidden = linear(ops, params, f"{prefix}.{names.intermediate}", x)  # (B, S, I)
    hidden = activation(ops, hidden, hidden_act, name=f"{prefix}.{names.intermediate}.act")
    out = linear(ops, params, f"{prefix}.{names.output}", hidden)  # (B, S, H)
    out = ops.add(out, x, name=f"{prefix}.{names.output}.residual")
    return layer_norm(ops, params, f"{prefix}.{names.output_norm}", out, eps)  # (B, S, H)


# -- configs ----------------------------------------------------------------------------------------------------------
# Keys of a transformers config.json that do not change what these encoders compute at inference, ignored by name:
# bookkeeping, training-only settings (dropout, initialisation, gradient checkpointing), special token ids, and flags of
# caching, weight tying and the output format. These are what save_pretrained of BertForQuestionAnswering, BertModel,
# AlbertForQuestionAnswering and RoFormerForSequenceClassification writes besides the config fields (transformers 4.x and
# 5.x), plus keys of older hub configs (e.g. all-MiniLM-L6-v2's). Any other key is refused, so that a checkpoint feature
# the numpy models lack is never dropped silently.
IGNORED_CONFIG_KEYS = frozenset({
    # bookkeeping
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "id2label",
    "label2id", "num_labels", "problem_type", "finetuning_task", "task_specific_params", "tokenizer_class", "prefix",
    # training only
    "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "classifier_dropout_prob",
    "initializer_range", "gradient_checkpointing", "use_bfloat16",
    # special tokens, caching, weight tying, output format, encoder-decoder wiring (unused without is_decoder)
    "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "use_cache", "tie_word_embeddings",
    "chunk_size_feed_forward", "output_attentions", "output_hidden_states", "return_dict", "torchscript",
    "is_encoder_decoder", "add_cross_attention",
})
# Keys that would change the computation with another value: accepted when absent, null or the value implemented here.
REQUIRED_CONFIG_VALUES = {"is_decoder": False, "position_embedding_type": "absolute", "pruned_heads": {}}
# What each size may be (inclusive), wide enough for any published encoder of these families (vocabularies to 10M
# tokens, 128k positions, widths to 64k) and narrow enough that a value outside means a mistake (a negative count, a
# width of millions) rather than a model; the memory the parameters take is checked when they are built.
CONFIG_RANGES = {
    "vocab_size": (1, 10_000_000),
    "hidden_size": (1, 65_536),
    "num_hidden_layers": (1, 1_024),
    "num_attention_heads": (1, 1_024),
    "intermediate_size": (1, 262_144),
    "max_position_embeddings": (1, 131_072),
    "type_vocab_size": (1, 1_024),
    "layer_norm_eps": (0.0, 1.0),
    "seq_len": (1, 131_072),
    "embedding_size": (1, 65_536),
    "num_hidden_groups": (1, 1_024),
    "inner_group_num": (1, 1_024),
}


def _json_value(value, kind: type):
    """``value`` (from JSON) as ``kind``, or None when it is not one: a float field takes any number, an int field
    only integers (never a bool)."""
    if isinstance(value, bool):
        return value if kind is bool else None
    if kind is float and isinstance(value, (int, float)):
        return float(value)
    return value if isinstance(value, kind) else None


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """The fields BERT, ALBERT and RoFormer share (transformers' names, plus ``seq_len``). The defaults here are those
    all three models have; each subclass sets ``vocab_size``, ``hidden_act``, ``max_position_embeddings`` and
    ``seq_len``, and adds its own fields.

    :meth:`from_overrides` (seeded models) and :meth:`from_checkpoint_config` (a checkpoint's config.json) build a
    validated config; subclasses extend :meth:`validate` and the ClassVars below."""

    MODEL_NAME: ClassVar[str] = ""  # the registry name, which starts the validation messages
    LOCAL_FIELDS: ClassVar[tuple[str, ...]] = ("seq_len",)  # fields that are ours, not in transformers' config.json
    IGNORED_KEYS: ClassVar[frozenset[str]] = IGNORED_CONFIG_KEYS
    REQUIRED_VALUES: ClassVar[dict[str, Any]] = REQUIRED_CONFIG_VALUES

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    seq_len: int  # input length (not in transformers' config)

    def __post_init__(self):
        check_fields(self, CONFIG_RANGES)  # every field of its type and within CONFIG_RANGES, also for direct builds

    def validate(self) -> None:
        """A ValueError naming the model and the field for a config the model cannot run."""
        name = self.MODEL_NAME
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{name}: hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.hidden_act not in GELU_FORMS:
            raise ValueError(f"{name}: hidden_act {self.hidden_act!r} is not supported; expected one of {sorted(GELU_FORMS)}")
        if not 1 <= self.seq_len <= self.max_position_embeddings:
            raise ValueError(f"{name}: seq_len {self.seq_len} must be in [1, max_position_embeddings = "
                             f"{self.max_position_embeddings}]")

    @classmethod
    def from_overrides(cls, **overrides):
        """The default config with ``overrides`` (see :func:`models.base.apply_overrides`), validated."""
        config = apply_overrides(cls(), overrides)
        config.validate()
        return config

    @classmethod
    def from_checkpoint_config(cls, raw: dict[str, Any], source: str, **overrides):
        """The config a transformers ``config.json`` (``raw``, a dict) describes, with ``overrides`` on top, validated.

        Strict: every field but :attr:`LOCAL_FIELDS` must be present (not null) with its type (a float field takes
        any number); keys in :attr:`REQUIRED_VALUES` must have that value; other keys must be in :attr:`IGNORED_KEYS`.
        Each violation is a CheckpointError starting with ``source`` and naming config.json and the key."""
        hints = get_type_hints(cls)
        read = [f.name for f in fields(cls) if f.name not in cls.LOCAL_FIELDS]
        values = {}
        for name in read:
            value = raw.get(name)
            if value is None:
                raise CheckpointError(f"{source}: config.json lacks {name!r} (expected a transformers {cls.__name__})")
            kind = hints[name]
            values[name] = _json_value(value, kind)
            if values[name] is None:
                raise CheckpointError(f"{source}: config.json field {name!r} is {json.dumps(value)} "
                                      f"({type(value).__name__}), expected {kind.__name__}")
        for key, wanted in cls.REQUIRED_VALUES.items():
            if raw.get(key) is not None and raw[key] != wanted:
                raise CheckpointError(f"{source}: config.json sets {key} = {json.dumps(raw[key])}, which is not "
                                      f"supported (only {json.dumps(wanted)})")
        unknown = sorted(set(raw) - set(read) - set(cls.REQUIRED_VALUES) - cls.IGNORED_KEYS)
        if unknown:
            raise CheckpointError(f"{source}: config.json has unknown key(s) {unknown} (not {cls.__name__} fields, nor "
                                  "keys known to leave the computation unchanged)")
        try:
            config = apply_overrides(cls(**values), overrides)
            config.validate()
        except CheckpointError:
            raise
        except (TypeError, ValueError) as exc:  # a value outside its range, sizes that do not fit together
            raise CheckpointError(f"{source}: config.json: {exc}") from None
        return config


def largest_activation_bytes(config: TransformerConfig, batch: int) -> int:
    """Bytes of the largest float32 tensor one forward pass of ``batch`` rows creates: the attention scores of every
    head (S x S), the FFN's intermediate or the embeddings, whichever is larger."""
    s, h = config.seq_len, config.hidden_size
    return 4 * batch * max(config.num_attention_heads * s * s, s * config.intermediate_size,
                           s * getattr(config, "embedding_size", h), s * h)


# -- seeded weights ---------------------------------------------------------------------------------------------------
# Scales that make a random network look numerically like a trained one (std of N(0, .) unless said otherwise), checked on
# the full-size models: weights std gain/sqrt(fan_in) keep activations of order 1; queries and keys get QK_GAIN so that
# attention scores have a std ~QK_GAIN**2 and the attention stays peaked in every layer (mean max probability ~0.3-0.4)
# instead of uniform; the two linears that write into the residual stream (attention output, FFN output) get BRANCH_GAIN so
# tokens keep distinct representations through 12 layers (mean cosine similarity ~0.5 at the top, as in trained BERT,
# instead of collapsing to ~1); output heads get OUTPUT_GAIN so logits spread over a few units (std ~2-3); LayerNorm
# gains ~N(1, 0.1), biases ~N(0, 0.02), embedding tables ~N(0, 0.05) (trained BERT's word embeddings have std ~0.05).
QK_GAIN = 2.0
BRANCH_GAIN = 0.3
OUTPUT_GAIN = 4.0
NORM_GAIN_STD = 0.1
BIAS_STD = 0.02
EMBEDDING_STD = 0.05


def seeded_params(shapes: dict[str, tuple[int, ...]], seed: int, names: LayerNames,
                  output_layers: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Deterministic FP32 weights for ``shapes`` (names as in the checkpoint), scaled as documented above."""
    init = ParamInit(seed)
    branches = ("." + names.attention_output, "." + names.output)
    params = {}
    for name, shape in shapes.items():
        layer, kind = name.rsplit(".", 1)
        if kind == "bias":
            params[name] = init.normal(name, shape, BIAS_STD)
        elif len(shape) == 1:  # LayerNorm gain
            params[name] = init.normal(name, shape, NORM_GAIN_STD, mean=1.0)
        elif layer.endswith("embeddings"):  # (vocab, dim) lookup table
            params[name] = init.normal(name, shape, EMBEDDING_STD)
        else:  # linear (out, in)
            if layer.endswith((f".{names.query}", f".{names.key}")):
                gain = QK_GAIN
            elif layer.endswith(branches):
                gain = BRANCH_GAIN
            else:
                gain = OUTPUT_GAIN if layer in output_layers else 1.0
            params[name] = init.normal(name, shape, gain / np.sqrt(shape[1]))
    return params


# -- a QA head fitted to the planted answers --------------------------------------------------------------------------
# A trained SQuAD model's start and end logits peak sharply at the answer. The seeded QA models get that by fitting their
# span head (``qa_outputs``, hidden -> 2) in closed form to the answers that models.text.squad_examples plants, on the FP32
# final hidden states of SPAN_FIT_SAMPLES generated rows (seed SPAN_FIT_SEED, disjoint from the evaluation and FP8
# calibration seeds 0 and 1): per logit a regularised linear discriminant w = (C + ridge I)^-1 (mu_answer - mu_other)
# over the context positions, scaled so the answer position scores SPAN_MARGIN above the mean of the other positions,
# whose mean the bias puts at 0. The encoder weights stay as seeded; only the head is fitted.
SPAN_FIT_SAMPLES = 4
SPAN_FIT_SEED = 7
SPAN_FIT_MAX_LEN = 128  # rows are cut to this many tokens while fitting (the cost grows with the length)
SPAN_MARGIN = 12.0
SPAN_RIDGE = 2.0  # relative to the mean variance of the hidden features


def fit_span_head(encode, inputs: dict[str, np.ndarray], answers: np.ndarray):
    """The (2, hidden) weight and (2,) bias of a span head whose start/end logits peak at ``answers`` ((batch, 2)
    inclusive positions, -1 for none) on the FP32 final hidden states ``encode(inputs, ops)`` (B, S, H) of ``inputs``;
    None when no row has an answer (sequences too short for one). Each row runs alone, cut to its attended length
    (padding does not change the attended positions' outputs)."""
    features, labels = [], []
    for row in range(len(answers)):
        length = int(np.count_nonzero(inputs["attention_mask"][row]))
        one = {key: value[row:row + 1, :length] for key, value in inputs.items()}
        hidden = encode(one, FP32)[0].astype(np.float64)  # (length, H)
        context = np.flatnonzero(one["token_type_ids"][0] == 1)
        if context.size == 0 or answers[row, 0] < 0:
            continue
        features.append(hidden[context])
        labels.append(np.stack([context == answers[row, 0], context == answers[row, 1]], axis=1))
    if not features:
        return None
    x = np.concatenate(features)  # (N, H)
    y = np.concatenate(labels)  # (N, 2) bool
    centred = x - x.mean(axis=0)
    cov = centred.T @ centred / len(x)
    cov[np.diag_indices_from(cov)] += SPAN_RIDGE * np.trace(cov) / len(cov)
    weight = np.empty((2, x.shape[1]))
    bias = np.empty(2)
    for k in range(2):
        hit = y[:, k]
        w = np.linalg.solve(cov, x[hit].mean(axis=0) - x[~hit].mean(axis=0))
        z = x @ w
        w *= SPAN_MARGIN / (z[hit].mean() - z[~hit].mean())
        weight[k], bias[k] = w, -(x[~hit] @ w).mean()
    return weight.astype(np.float32), bias.astype(np.float32)


def fit_seeded_span_head(model) -> None:
    """Replace the seeded ``qa_outputs`` of ``model`` (a QA model with ``encode`` and ``sample_examples``) by the head
    fitted to SPAN_FIT_SAMPLES of its own planted answers (see fit_span_head)."""
    seq_len = min(model.config.seq_len, SPAN_FIT_MAX_LEN)
    inputs, answers = model.sample_examples(SPAN_FIT_SAMPLES, SPAN_FIT_SEED, seq_len=seq_len)
    fitted = fit_span_head(model.encode, inputs, answers)
    if fitted is not None:
        model.params["qa_outputs.weight"], model.params["qa_outputs.bias"] = fitted


# -- inputs -----------------------------------------------------------------------------------------------------------
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def token_input_specs(seq_len: int, names: tuple[str, ...] = TOKEN_INPUTS) -> tuple[InputSpec, ...]:
    return tuple(InputSpec(name, (seq_len,), "int", "int64") for name in names)


def check_token_ids(model_name: str, inputs: dict[str, np.ndarray], vocab_size: int, type_vocab_size: int) -> None:
    """Token and segment ids must index their embedding tables; an InputError names the input and the valid range."""
    for key, size in (("input_ids", vocab_size), ("token_type_ids", type_vocab_size)):
        ids = inputs[key]
        xp = arrays.namespace(ids)
        if xp is not np:  # another library's array: its extrema as Python ints
            low, high = (int(xp.min(ids)), int(xp.max(ids))) if math.prod(ids.shape) else (0, 0)
        else:
            low, high = (ids.min(), ids.max()) if ids.size else (0, 0)
        if low < 0 or high >= size:
            raise InputError(f"{model_name}: input {key!r} has ids in [{low}, {high}], expected [0, {size - 1}]")
