"""Config dataclasses and the strict config.json reader of bert-base, albert and roformer (models.encoder.TransformerConfig),
and the checks every model's checkpoint reading shares (models.base.read_checkpoint). No torch needed: configs are dicts."""

from __future__ import annotations

import dataclasses
import json
import re

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from models import CheckpointError, albert, bert, roformer, widedeep
from models.base import read_checkpoint
from models.encoder import IGNORED_CONFIG_KEYS, TransformerConfig

COMMON = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
              type_vocab_size=2, layer_norm_eps=1e-12)
# The defaults as reference/manifest.json records them (asdict of the seeded models' configs).
DEFAULTS = {
    bert.BertConfig: dict(COMMON, vocab_size=30522, hidden_act="gelu", max_position_embeddings=512, seq_len=384,
                          architecture="BertForQuestionAnswering"),
    albert.AlbertConfig: dict(COMMON, vocab_size=30000, embedding_size=128, num_hidden_groups=1, inner_group_num=1,
                              hidden_act="gelu_new", max_position_embeddings=512, seq_len=384),
    roformer.RoFormerConfig: dict(COMMON, vocab_size=50000, embedding_size=768, hidden_act="gelu",
                                  max_position_embeddings=1536, seq_len=1024),
}
CONFIGS = list(DEFAULTS)


def checkpoint_dict(cls, **changes) -> dict:
    """A config.json as save_pretrained writes it for ``cls`` at small sizes (transformers 5.x keys)."""
    fields = {k: v for k, v in DEFAULTS[cls].items() if k not in cls.LOCAL_FIELDS}
    fields.update(hidden_size=40, num_attention_heads=5, intermediate_size=52, max_position_embeddings=64)
    if "embedding_size" in fields:
        fields["embedding_size"] = 24
    bookkeeping = {"architectures": ["X"], "model_type": "x", "dtype": "float32", "transformers_version": "5.24.0",
                   "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
                   "pad_token_id": 0, "tie_word_embeddings": True, "is_decoder": False}
    return {**bookkeeping, **fields, **changes}


@pytest.mark.parametrize("cls", CONFIGS)
def test_defaults_are_those_of_the_reference_manifest(cls):
    assert issubclass(cls, TransformerConfig)
    assert dataclasses.asdict(cls()) == DEFAULTS[cls]


@pytest.mark.parametrize("cls", CONFIGS)
def test_reader_takes_the_fields_and_keeps_the_local_ones(cls):
    config = cls.from_checkpoint_config(checkpoint_dict(cls), "ck", seq_len=37)
    assert (config.hidden_size, config.max_position_embeddings, config.seq_len) == (40, 64, 37)
    for name in set(cls.LOCAL_FIELDS) - {"seq_len"}:
        assert getattr(config, name) == getattr(cls(), name)


@pytest.mark.parametrize("cls", CONFIGS)
def test_reader_converts_an_integer_for_a_float_field(cls):
    config = cls.from_checkpoint_config(checkpoint_dict(cls, layer_norm_eps=0), "ck", seq_len=8)
    assert config.layer_norm_eps == 0.0 and isinstance(config.layer_norm_eps, float)


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize("field, value, expected", [
    ("vocab_size", "211", "int"), ("intermediate_size", 52.0, "int"), ("num_hidden_layers", False, "int"),
    ("hidden_act", ["gelu"], "str"), ("layer_norm_eps", "1e-12", "float"), ("type_vocab_size", {"n": 2}, "int"),
])
def test_reader_names_the_field_and_type(cls, field, value, expected):
    message = f"ck: config.json field '{field}' is {json.dumps(value)} ({type(value).__name__}), expected {expected}"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        cls.from_checkpoint_config(checkpoint_dict(cls, **{field: value}), "ck", seq_len=8)


@pytest.mark.parametrize("cls", CONFIGS)
def test_reader_refuses_missing_null_and_unknown_keys(cls):
    raw = checkpoint_dict(cls)
    del raw["num_attention_heads"]
    message = f"ck: config.json lacks 'num_attention_heads' (expected a transformers {cls.__name__})"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        cls.from_checkpoint_config(raw, "ck", seq_len=8)
    with pytest.raises(CheckpointError, match="config.json lacks 'vocab_size'"):
        cls.from_checkpoint_config(checkpoint_dict(cls, vocab_size=None), "ck", seq_len=8)
    with pytest.raises(CheckpointError, match=r"unknown key\(s\) \['seq_len', 'use_rotary'\]"):
        cls.from_checkpoint_config(checkpoint_dict(cls, seq_len=8, use_rotary=True), "ck")


@pytest.mark.parametrize("cls", CONFIGS)
def test_reader_ignores_bookkeeping_keys(cls):
    raw = checkpoint_dict(cls, **{key: None for key in IGNORED_CONFIG_KEYS})
    raw.update(id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}, architectures=["X"], torch_dtype="float32")
    assert cls.from_checkpoint_config(raw, "ck", seq_len=8).hidden_size == 40


def test_reader_validates_after_the_overrides():
    raw = checkpoint_dict(bert.BertConfig)
    with pytest.raises(ValueError, match=r"bert-base: seq_len 384 must be in \[1, max_position_embeddings = 64\]"):
        bert.BertConfig.from_checkpoint_config(raw, "ck")
    with pytest.raises(ValueError, match="bert-base: architecture 'BertLMHead'"):
        bert.BertConfig.from_checkpoint_config(raw, "ck", seq_len=8, architecture="BertLMHead")
    raw = checkpoint_dict(albert.AlbertConfig, num_hidden_groups=13)
    with pytest.raises(ValueError, match="albert: num_hidden_groups 13 must be in"):
        albert.AlbertConfig.from_checkpoint_config(raw, "ck", seq_len=8)
    raw = checkpoint_dict(roformer.RoFormerConfig, num_attention_heads=8)
    with pytest.raises(ValueError, match="roformer: the head size 5 must be even"):
        roformer.RoFormerConfig.from_checkpoint_config(raw, "ck", seq_len=8)
    with pytest.raises(ValueError, match="roformer: hidden_act 'relu' is not supported"):
        roformer.RoFormerConfig.from_overrides(hidden_act="relu")


def test_roformer_without_embedding_size_uses_the_hidden_size():
    raw = checkpoint_dict(roformer.RoFormerConfig)
    del raw["embedding_size"]
    assert roformer.RoFormerConfig.from_checkpoint_config(raw, "ck", seq_len=8).embedding_size == 40
    raw["embedding_size"] = None
    assert roformer.RoFormerConfig.from_checkpoint_config(raw, "ck", seq_len=8).embedding_size == 40


@pytest.mark.parametrize("content", ["[1, 2]", '"config"', "3"])
def test_config_json_that_is_not_an_object(tmp_path, content):
    """read_checkpoint, which all six models use, refuses it before reading the weights."""
    (tmp_path / "config.json").write_text(content)
    (tmp_path / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(CheckpointError, match=re.escape(f"{str(tmp_path / 'config.json')!r} is not a JSON object")):
        read_checkpoint(tmp_path)


# -- checkpoint tensor dtypes and values (models.base.take_params) ---------------------------------------------------
WIDE = dict(bucket_sizes=(5, 7), num_numeric=3, embedding_dim=4, hidden_sizes=(8,))
FIRST = ("wide.categorical.0.weight",)


def _widedeep_checkpoint(tmp_path, convert=None, name="ckpt"):
    """A small widedeep checkpoint; ``convert(name, array)`` rewrites its tensors (safetensors.numpy.save_file)."""
    model = widedeep.load(**WIDE)
    path = widedeep.save_checkpoint(model, tmp_path / name)
    if convert is not None:
        tensors = {k: convert(k, np.asarray(v)) for k, v in model.params.items()}
        save_file(tensors, str(path / "model.safetensors"))
    return model, path


def test_float32_checkpoint_records_its_dtype(tmp_path):
    model, path = _widedeep_checkpoint(tmp_path)
    loaded = widedeep.load(path)
    assert loaded.checkpoint_dtypes == {"float32": len(model.params)} and not loaded.half_precision_checkpoint
    assert model.checkpoint_dtypes == {}  # seeded weights


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_precision_checkpoint_is_widened_and_recorded(tmp_path, dtype):
    model, path = _widedeep_checkpoint(tmp_path, lambda k, v: v.astype(dtype))
    loaded = widedeep.load(path)
    name = np.dtype(dtype).name
    assert loaded.checkpoint_dtypes == {name: len(model.params)} and loaded.half_precision_checkpoint
    for key, value in loaded.params.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, model.params[key].astype(dtype).astype(np.float32))


def test_torch_bfloat16_checkpoint(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as torch_save
    model, path = _widedeep_checkpoint(tmp_path)
    torch_save({k: torch.from_numpy(np.array(v)).to(torch.bfloat16) for k, v in model.params.items()}, str(path / "model.safetensors"))
    loaded = widedeep.load(path)
    assert loaded.checkpoint_dtypes == {"bfloat16": len(model.params)}
    first = next(iter(model.params))
    expected = torch.from_numpy(np.array(model.params[first])).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(loaded.params[first], expected)


def test_mixed_dtypes_are_counted(tmp_path):
    model, path = _widedeep_checkpoint(tmp_path, lambda k, v: v.astype(np.float16) if k == FIRST[0] else v)
    loaded = widedeep.load(path)
    assert loaded.checkpoint_dtypes == {"float16": 1, "float32": len(model.params) - 1}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.uint8])
def test_non_float_tensor_is_refused_naming_file_tensor_and_dtype(tmp_path, dtype):
    _, path = _widedeep_checkpoint(tmp_path, lambda k, v: v.astype(dtype) if k == FIRST[0] else v)
    message = f"tensor {FIRST[0]!r} in model.safetensors has dtype {np.dtype(dtype).name}; expected a float dtype"
    with pytest.raises(CheckpointError, match=re.escape(message)) as exc:
        widedeep.load(path)
    assert str(path) in str(exc.value)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_with_their_count(tmp_path, bad):
    def poison(key, value):
        if key != FIRST[0]:
            return value
        value = value.copy()
        value.flat[:2] = bad
        return value
    model, path = _widedeep_checkpoint(tmp_path, poison)
    size = np.size(model.params[FIRST[0]])
    message = f"tensor {FIRST[0]!r} in model.safetensors has 2 non-finite value(s) (NaN or Inf) of {size}"
    with pytest.raises(CheckpointError, match=re.escape(message)) as exc:
        widedeep.load(path)
    assert str(path) in str(exc.value)


def test_non_finite_half_precision_value_is_refused(tmp_path):
    def poison(key, value):
        value = value.astype(np.float16)
        if key == FIRST[0]:
            value = value.copy()
            value.flat[0] = np.inf
        return value
    _, path = _widedeep_checkpoint(tmp_path, poison)
    with pytest.raises(CheckpointError, match="1 non-finite value"):
        widedeep.load(path)


def test_safetensors_numpy_reads_bfloat16(tmp_path):
    """The numpy loader returns ml_dtypes.bfloat16 arrays, which read_checkpoint passes on to take_params to widen."""
    save_file({"x": np.array([1.5, -2.0], ml_dtypes.bfloat16)}, str(tmp_path / "bf16.safetensors"))
    assert load_file(str(tmp_path / "bf16.safetensors"))["x"].dtype == np.dtype(ml_dtypes.bfloat16)


def test_config_overrides_name_the_field_and_type():
    from models.base import apply_overrides
    config = bert.BertConfig()
    assert apply_overrides(config, {"seq_len": "128"}).seq_len == 128
    with pytest.raises(ValueError, match=re.escape("config field BertConfig.seq_len expects an integer, got 'abc'")):
        apply_overrides(config, {"seq_len": "abc"})
    with pytest.raises(ValueError, match=re.escape("config field BertConfig.layer_norm_eps expects a number, got 'x'")):
        apply_overrides(config, {"layer_norm_eps": "x"})
    # numbers are read as written: int() and float() also take other scripts' digits, separators, nan and inf
    for field, text in (("seq_len", "\u0661\u0662\u0668"), ("seq_len", "1_28"), ("seq_len", "9" * 30),
                        ("layer_norm_eps", "\u0661e-5"), ("layer_norm_eps", "nan"), ("layer_norm_eps", "inf"),
                        ("layer_norm_eps", "1_0.5")):
        with pytest.raises(ValueError, match=f"config field BertConfig.{field} expects"):
            apply_overrides(config, {field: text})
    assert apply_overrides(config, {"layer_norm_eps": "2.5e-3"}).layer_norm_eps == 2.5e-3
