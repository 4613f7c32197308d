"""ALBERT-base-v2 with the SQuAD span head: transformers' ``AlbertForQuestionAnswering`` in numpy.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (batch, seq_len) ints -> ``start_logits``, ``end_logits``
(batch, seq_len). ALBERT factorises the embeddings (vocab -> embedding_size 128, then ``embedding_hidden_mapping_in`` to the
hidden size) and shares one layer's weights across all 12 layers (one layer group). The repeated applications of a shared
layer call ``ops`` under the same names (the prefix of the weights they share), once per application, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from models import encoder, text
from models.base import (
    Model, cached_params, check_parameter_memory, parameter_bytes, read_checkpoint, take_params)
from models.ops import contiguous
from models.spec import BUILTIN_TABLES, ModelSpec


@dataclass(frozen=True, kw_only=True)
class AlbertConfig(encoder.TransformerConfig):
    # albert-base-v2 (12 layers sharing one set of weights, H768, embedding 128, A12, FFN 3072, vocab 30000, gelu_new,
    # LN eps 1e-12) at SQuAD v1.1 max_seq 384: the seed benchmark's albert (../shared/facts/models.md). The sizes not
    # restated here are TransformerConfig's.
    MODEL_NAME: ClassVar[str] = "albert"
    # Keys of the original ALBERT release's configs (albert-base-v2 on the hub), unused by transformers.
    IGNORED_KEYS: ClassVar[frozenset[str]] = encoder.IGNORED_CONFIG_KEYS | {
        "down_scale_factor", "gap_size", "net_structure_type", "num_memory_blocks"}

    vocab_size: int = 30000
    embedding_size: int = 128
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    max_position_embeddings: int = 512
    seq_len: int = 384

    def validate(self) -> None:
        super().validate()
        if not 1 <= self.num_hidden_groups <= self.num_hidden_layers or self.inner_group_num < 1:
            raise ValueError(f"{self.MODEL_NAME}: num_hidden_groups {self.num_hidden_groups} must be in [1, "
                             f"num_hidden_layers = {self.num_hidden_layers}] and inner_group_num {self.inner_group_num} "
                             "at least 1")


ALBERT_LAYER = encoder.LayerNames(
    query="attention.query", key="attention.key", value="attention.value", attention_output="attention.dense",
    attention_norm="attention.LayerNorm", intermediate="ffn", output="ffn_output", output_norm="full_layer_layer_norm")


def layer_prefix(group: int, inner: int) -> str:
    return f"albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}"


def param_shapes(config: AlbertConfig) -> dict[str, tuple[int, ...]]:
    e, h = config.embedding_size, config.hidden_size
    shapes = {
        "albert.embeddings.word_embeddings.weight": (config.vocab_size, e),
        "albert.embeddings.position_embeddings.weight": (config.max_position_embeddings, e),
        "albert.embeddings.token_type_embeddings.weight": (config.type_vocab_size, e),
        "albert.embeddings.LayerNorm.weight": (e,),
        "albert.embeddings.LayerNorm.bias": (e,),
        "albert.encoder.embedding_hidden_mapping_in.weight": (h, e),
        "albert.encoder.embedding_hidden_mapping_in.bias": (h,),
    }
    for group in range(config.num_hidden_groups):
        for inner in range(config.inner_group_num):
            shapes.update(ALBERT_LAYER.shapes(layer_prefix(group, inner), h, config.intermediate_size))
    shapes["qa_outputs.weight"] = (2, h)
    shapes["qa_outputs.bias"] = (2,)
    return shapes


class AlbertForQuestionAnswering(Model):
    name = "albert"
    output_names = ("start_logits", "end_logits")

    @property
    def input_specs(self):
        return encoder.token_input_specs(self.config.seq_len)

    def encode(self, inputs, ops) -> np.ndarray:
        """The final hidden states (B, S, H)."""
        c = self.config
        encoder.check_token_ids(self.name, inputs, c.vocab_size, c.type_vocab_size)
        p = self.params_like(inputs["input_ids"])
        mask = encoder.extended_attention_mask(inputs["attention_mask"])  # (B, 1, 1, S)
        x = encoder.embeddings(ops, p, "albert.embeddings", inputs["input_ids"], inputs["token_type_ids"],
                               eps=c.layer_norm_eps)  # (B, S, E)
        x = encoder.linear(ops, p, "albert.encoder.embedding_hidden_mapping_in", x)  # (B, S, H)
        for i in range(c.num_hidden_layers):
            group = int(i / (c.num_hidden_layers / c.num_hidden_groups))  # transformers' AlbertTransformer rule
            for inner in range(c.inner_group_num):
                x = encoder.encoder_layer(ops, p, layer_prefix(group, inner), ALBERT_LAYER, x, mask,
                                          num_heads=c.num_attention_heads, hidden_act=c.hidden_act, eps=c.layer_norm_eps)
        return x

    def forward(self, inputs, ops):
        x = self.encode(inputs, ops)  # (B, S, H)
        logits = encoder.linear(ops, self.params_like(x), "qa_outputs", x)  # (B, S, 2)
        return {"start_logits": contiguous(logits[..., 0]), "end_logits": contiguous(logits[..., 1])}

    def sample_inputs(self, batch_size: int, seed: int = 0):
        """SQuAD-like rows (see :func:`models.text.squad_like`) in the albert-base-v2 SentencePiece vocabulary layout."""
        return self.sample_examples(batch_size, seed)[0]

    def sample_examples(self, batch_size: int, seed: int = 0, seq_len: int | None = None):
        """The rows of :meth:`sample_inputs` (at ``seq_len``, the model's by default) and their planted answers (batch, 2)."""
        vocab = text.Vocabulary.for_model(self.config.vocab_size, **text.ALBERT_VOCAB)
        return text.squad_examples(batch_size, seed, seq_len or self.config.seq_len, vocab)



def build_config(**overrides) -> AlbertConfig:
    """The validated config with ``overrides`` (no weights built)."""
    return AlbertConfig.from_overrides(**overrides)


def host_bytes(config: AlbertConfig, batch: int) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` rows)."""
    return parameter_bytes(param_shapes(config)), encoder.largest_activation_bytes(config, batch)



def assemble(config, params):
    """The model of ``config`` with seeded weights that a store kept (:func:`models.load_model`), checked to be
    exactly its tensors (a CheckpointError otherwise)."""
    return AlbertForQuestionAnswering(config, cached_params(params, param_shapes(config), "albert (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> AlbertForQuestionAnswering:
    """Seeded weights at the albert-base-v2 size (the QA head fitted to the planted answers of the sample rows), or an
    ``AlbertForQuestionAnswering`` checkpoint directory (every tensor used unless ``allow_unused``, see
    :func:`models.base.take_params`)."""
    if checkpoint is None:
        config = AlbertConfig.from_overrides(**overrides)
        check_parameter_memory(param_shapes(config), "albert (seeded weights)")
        params = encoder.seeded_params(param_shapes(config), seed, ALBERT_LAYER, output_layers=("qa_outputs",))
        model = AlbertForQuestionAnswering(config, params)
        encoder.fit_seeded_span_head(model)  # the span head of a trained model (see models.encoder)
        return model
    data, tensors = read_checkpoint(checkpoint)
    source = f"albert checkpoint {str(checkpoint)!r}"
    config = AlbertConfig.from_checkpoint_config(data, source, **overrides)
    return AlbertForQuestionAnswering(config, take_params(tensors, param_shapes(config), source,
                                                          allow_unused=allow_unused))


SPEC = ModelSpec(
    name="albert", module=__name__, model_class="AlbertForQuestionAnswering", primary_output="start_logits",
    task_metrics=("exact_match", "f1"), task_scorer="conformance.accuracy.metrics:squad_span_agreement",
    label_metrics=("squad_exact_match", "squad_f1"), dataset_format="conformance.datasets.squad",
    checkpoint_type="albert", sequence_config="AlbertConfig", aliases=("albert-base",),
    tables=BUILTIN_TABLES / "albert")
