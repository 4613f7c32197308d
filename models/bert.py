"""BERT-base with the SQuAD span head: transformers' ``BertForQuestionAnswering`` in numpy.

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (batch, seq_len) ints -> ``start_logits``, ``end_logits``
(batch, seq_len). A plain ``BertModel`` checkpoint (tensor names without the ``bert.`` prefix, no ``qa_outputs``, e.g.
all-MiniLM-L6-v2) loads as :class:`BertModel`, whose output is ``last_hidden_state`` (batch, seq_len, hidden_size).
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

PREFIXES = {"BertForQuestionAnswering": "bert.", "BertModel": ""}  # where the encoder's tensors live in the checkpoint
# A BertModel checkpoint's pooler (transformers' pooler_output): not an output of the suite's BertModel, whose output is
# last_hidden_state; it is listed as not read.
POOLER = {"pooler.dense.weight": "the pooler (pooler_output), which BertModel's last_hidden_state does not use",
          "pooler.dense.bias": "the pooler (pooler_output), which BertModel's last_hidden_state does not use"}


@dataclass(frozen=True, kw_only=True)
class BertConfig(encoder.TransformerConfig):
    # bert-base-uncased (L12, H768, A12, FFN 3072, vocab 30522, erf GELU, LN eps 1e-12) at SQuAD v1.1 max_seq 384:
    # the seed benchmark's bert-base (../shared/facts/models.md). The sizes not restated here are TransformerConfig's.
    MODEL_NAME: ClassVar[str] = "bert-base"
    LOCAL_FIELDS: ClassVar[tuple[str, ...]] = ("seq_len", "architecture")  # architecture: from the tensor names
    # Keys of BERT configs converted from Google's TensorFlow checkpoints (e.g. bert-base-chinese), unused by transformers.
    IGNORED_KEYS: ClassVar[frozenset[str]] = encoder.IGNORED_CONFIG_KEYS | {
        "directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
        "pooler_type"}

    vocab_size: int = 30522
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    seq_len: int = 384
    architecture: str = "BertForQuestionAnswering"  # or "BertModel" (no head, outputs last_hidden_state)

    def validate(self) -> None:
        if self.architecture not in PREFIXES:
            raise ValueError(f"{self.MODEL_NAME}: architecture {self.architecture!r} is not one of {sorted(PREFIXES)}")
        super().validate()


def param_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    base = PREFIXES[config.architecture]
    h = config.hidden_size
    shapes = {
        f"{base}embeddings.word_embeddings.weight": (config.vocab_size, h),
        f"{base}embeddings.position_embeddings.weight": (config.max_position_embeddings, h),
        f"{base}embeddings.token_type_embeddings.weight": (config.type_vocab_size, h),
        f"{base}embeddings.LayerNorm.weight": (h,),
        f"{base}embeddings.LayerNorm.bias": (h,),
    }
    for i in range(config.num_hidden_layers):
        shapes.update(encoder.BERT_LAYER.shapes(f"{base}encoder.layer.{i}", h, config.intermediate_size))
    if config.architecture == "BertForQuestionAnswering":
        shapes["qa_outputs.weight"] = (2, h)
        shapes["qa_outputs.bias"] = (2,)
    return shapes


class BertModel(Model):
    """The BERT encoder: embeddings + post-LN layers; output ``last_hidden_state`` (batch, seq_len, hidden_size)."""

    name = "bert-base"
    output_names = ("last_hidden_state",)

    @property
    def input_specs(self):
        return encoder.token_input_specs(self.config.seq_len)

    def encode(self, inputs, ops) -> np.ndarray:
        c = self.config
        encoder.check_token_ids(self.name, inputs, c.vocab_size, c.type_vocab_size)
        base = PREFIXES[c.architecture]
        p = self.params_like(inputs["input_ids"])
        mask = encoder.extended_attention_mask(inputs["attention_mask"])  # (B, 1, 1, S)
        x = encoder.embeddings(ops, p, f"{base}embeddings", inputs["input_ids"], inputs["token_type_ids"],
                               eps=c.layer_norm_eps)  # (B, S, H)
        for i in range(c.num_hidden_layers):
            x = encoder.encoder_layer(ops, p, f"{base}encoder.layer.{i}", encoder.BERT_LAYER, x, mask,
                                      num_heads=c.num_attention_heads, hidden_act=c.hidden_act, eps=c.layer_norm_eps)
        return x  # (B, S, H)

    def forward(self, inputs, ops):
        return {"last_hidden_state": self.encode(inputs, ops)}

    def sample_inputs(self, batch_size: int, seed: int = 0):
        """SQuAD-like rows (see :func:`models.text.squad_like`) in the bert-base-uncased vocabulary layout."""
        return self.sample_examples(batch_size, seed)[0]

    def sample_examples(self, batch_size: int, seed: int = 0, seq_len: int | None = None):
        """The rows of :meth:`sample_inputs` (at ``seq_len``, the model's by default) and their planted answers (batch, 2)."""
        vocab = text.Vocabulary.for_model(self.config.vocab_size, **text.BERT_VOCAB)
        return text.squad_examples(batch_size, seed, seq_len or self.config.seq_len, vocab)


class BertForQuestionAnswering(BertModel):
    """BERT + ``qa_outputs`` (hidden -> 2): per-token start and end logits of the answer span."""

    output_names = ("start_logits", "end_logits")

    def forward(self, inputs, ops):
        x = self.encode(inputs, ops)  # (B, S, H)
        logits = encoder.linear(ops, self.params_like(x), "qa_outputs", x)  # (B, S, 2)
        return {"start_logits": contiguous(logits[..., 0]), "end_logits": contiguous(logits[..., 1])}


CLASSES = {"BertForQuestionAnswering": BertForQuestionAnswering, "BertModel": BertModel}



def build_config(**overrides) -> BertConfig:
    """The validated config with ``overrides`` (no weights built)."""
    return BertConfig.from_overrides(**overrides)


def host_bytes(config: BertConfig, batch: int) -> tuple[int, int]:
    """(float32 parameter bytes, bytes of the largest activation of one forward pass of ``batch`` rows)."""
    return parameter_bytes(param_shapes(config)), encoder.largest_activation_bytes(config, batch)



def assemble(config, params):
    """The model of ``config`` with seeded weights that a store kept (:func:`models.load_model`), checked to be
    exactly its tensors (a CheckpointError otherwise)."""
    return CLASSES[config.architecture](config, cached_params(params, param_shapes(config), "bert-base (cached seeded weights)"))


def load(checkpoint=None, seed: int = 0, allow_unused: bool = False, **overrides) -> BertModel:
    """Seeded weights at the bert-base size (the QA head fitted to the planted answers of the sample rows), or a
    ``BertForQuestionAnswering`` / ``BertModel`` checkpoint directory (told apart by the ``bert.`` prefix of the tensor
    names; every tensor used unless ``allow_unused``, see :func:`models.base.take_params`)."""
    if checkpoint is None:
        config = BertConfig.from_overrides(**overrides)
        check_parameter_memory(param_shapes(config), "bert-base (seeded weights)")
        params = encoder.seeded_params(param_shapes(config), seed, encoder.BERT_LAYER, output_layers=("qa_outputs",))
        model = CLASSES[config.architecture](config, params)
        if isinstance(model, BertForQuestionAnswering):
            encoder.fit_seeded_span_head(model)  # the span head of a trained model (see models.encoder)
        return model
    data, tensors = read_checkpoint(checkpoint)
    source = f"bert-base checkpoint {str(checkpoint)!r}"
    architecture = "BertForQuestionAnswering" if any(k.startswith("bert.") for k in tensors) else "BertModel"
    config = BertConfig.from_checkpoint_config(data, source, **{"architecture": architecture, **overrides})
    ignorable = POOLER if config.architecture == "BertModel" else {}
    return CLASSES[config.architecture](config, take_params(tensors, param_shapes(config), source,
                                                            allow_unused=allow_unused, ignorable=ignorable))


SPEC = ModelSpec(
    name="bert-base", module=__name__, model_class=lambda module, config: module.CLASSES[config.architecture],
    primary_output="start_logits", task_metrics=("exact_match", "f1"),
    task_scorer="conformance.accuracy.metrics:squad_span_agreement", label_metrics=("squad_exact_match", "squad_f1"),
    dataset_format="conformance.datasets.squad", checkpoint_type="bert", sequence_config="BertConfig",
    aliases=("bert",),
    tables=BUILTIN_TABLES / "bert-base")
