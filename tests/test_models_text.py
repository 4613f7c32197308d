"""bert-base, albert and roformer against transformers: small checkpoints with unusual sizes written by save_pretrained,
loaded by the numpy models and compared with the torch outputs; masking, bad input, determinism."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import models  # noqa: E402
from models import CheckpointError, InputError  # noqa: E402

SEQ_LEN = 37  # odd, and shorter than max_position_embeddings
# Unusual sizes: hidden 40 with 5 heads (head size 8), odd intermediate and vocab sizes.
SMALL = dict(hidden_size=40, num_attention_heads=5, num_hidden_layers=3, intermediate_size=52, vocab_size=211,
             max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
TOLERANCE = 1e-4  # max abs diff relative to the output scale (max abs of the torch output)

CASES = {
    "bert-base": (transformers.BertConfig, transformers.BertForQuestionAnswering, {}),
    "albert": (transformers.AlbertConfig, transformers.AlbertForQuestionAnswering,
               dict(embedding_size=24, num_hidden_layers=4, num_hidden_groups=2)),
    "roformer": (transformers.RoFormerConfig, transformers.RoFormerForSequenceClassification,
                 dict(embedding_size=24, num_labels=1)),
}


def _randomize(module, seed: int) -> None:
    """Weights of order one everywhere (the init of transformers leaves LayerNorm at 1/0 and biases at 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "embed_positions" in name:
                continue
            scale = 0.1 if name.endswith("bias") else 1.0 / np.sqrt(param.shape[-1])
            base = 1.0 if name.endswith("LayerNorm.weight") or name.endswith("layer_norm.weight") else 0.0
            param.copy_(base + scale * torch.randn(param.shape, generator=generator))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (checkpoint dir, torch model in eval mode)."""
    out = {}
    for index, (name, (config_cls, model_cls, extra)) in enumerate(CASES.items()):
        torch.manual_seed(index)
        model = model_cls(config_cls(**{**SMALL, **extra})).eval()
        _randomize(model, index)
        directory = tmp_path_factory.mktemp(name)
        model.save_pretrained(directory)
        out[name] = (directory, model)
    return out


def _torch_outputs(model, inputs, names):
    with torch.no_grad():
        result = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    return {name: getattr(result, name).numpy() for name in names}


def _padded_inputs(model, batch: int, seed: int):
    """The model's own sample generator, with varied padding (rows keep at least [CLS] + a few tokens)."""
    inputs = model.sample_inputs(batch, seed)
    rng = np.random.default_rng(seed)
    for row in range(batch):
        length = int(rng.integers(5, SEQ_LEN + 1)) if row else SEQ_LEN
        for key in inputs:
            inputs[key][row, length:] = 0
        inputs["attention_mask"][row, :length] = 1
    return inputs


@pytest.mark.parametrize("name", list(CASES))
def test_matches_transformers(name, checkpoints):
    directory, reference = checkpoints[name]
    model = models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)
    inputs = _padded_inputs(model, 4, seed=3)
    got = model(inputs)
    expected = _torch_outputs(reference, inputs, model.output_names)
    for key in model.output_names:
        assert got[key].shape == expected[key].shape, key
        assert got[key].dtype == np.float32
        scale = np.abs(expected[key]).max()
        diff = np.abs(got[key] - expected[key]).max()
        assert diff < TOLERANCE * scale, f"{name} {key}: max abs diff {diff:.3g} vs output scale {scale:.3g}"


def test_bert_model_checkpoint_outputs_last_hidden_state(tmp_path):
    """A plain BertModel checkpoint (no ``bert.`` prefix, a pooler, no QA head) loads and gives last_hidden_state."""
    torch.manual_seed(7)
    reference = transformers.BertModel(transformers.BertConfig(**SMALL)).eval()
    _randomize(reference, 7)
    reference.save_pretrained(tmp_path)
    model = models.load_model("bert-base", checkpoint=tmp_path, seq_len=SEQ_LEN)
    assert model.output_names == ("last_hidden_state",)
    inputs = _padded_inputs(model, 3, seed=5)
    got = model(inputs)["last_hidden_state"]
    expected = _torch_outputs(reference, inputs, ["last_hidden_state"])["last_hidden_state"]
    assert got.shape == (3, SEQ_LEN, SMALL["hidden_size"])
    assert np.abs(got - expected).max() < TOLERANCE * np.abs(expected).max()


@pytest.mark.parametrize("name", list(CASES))
def test_padding_does_not_change_unpadded_outputs(name, checkpoints):
    """Changing the ids behind the mask, or the amount of padding, leaves the outputs of the real tokens unchanged,
    as in transformers (checked against it on the same inputs)."""
    directory, reference = checkpoints[name]
    model = models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)
    inputs = model.sample_inputs(1, seed=11)
    length = 21
    short = {k: v.copy() for k, v in inputs.items()}
    for key in short:
        short[key][:, length:] = 0
    noisy = {k: v.copy() for k, v in short.items()}
    noisy["input_ids"][:, length:] = np.arange(SEQ_LEN - length) % 50 + 3
    noisy["token_type_ids"][:, length:] = 1
    a, b = model(short), model(noisy)
    ta, tb = _torch_outputs(reference, short, model.output_names), _torch_outputs(reference, noisy, model.output_names)
    for key in model.output_names:
        keep = (slice(None),) if key == "logits" else (slice(None), slice(0, length))
        np.testing.assert_allclose(a[key][keep], b[key][keep], rtol=0, atol=1e-6 * np.abs(ta[key]).max())
        np.testing.assert_allclose(ta[key][keep], tb[key][keep], rtol=0, atol=1e-5 * np.abs(ta[key]).max())
        scale = np.abs(tb[key][keep]).max()
        assert np.abs(b[key][keep] - tb[key][keep]).max() < TOLERANCE * scale


# -- bad input ------------------------------------------------------------------------------------------------------------
def _copy_checkpoint(source: Path, target: Path, edit=None) -> Path:
    from safetensors.numpy import load_file, save_file

    target.mkdir()
    (target / "config.json").write_text((source / "config.json").read_text())
    tensors = load_file(str(source / "model.safetensors"))
    if edit is not None:
        edit(tensors)
    save_file(tensors, str(target / "model.safetensors"))
    return target


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        models.load_model("bert-base", checkpoint=tmp_path / "nowhere")


@pytest.mark.parametrize("name, tensor", [
    ("bert-base", "bert.encoder.layer.2.attention.self.key.weight"),
    ("albert", "albert.encoder.albert_layer_groups.1.albert_layers.0.ffn.bias"),
    ("roformer", "classifier.out_proj.weight"),
])
def test_missing_tensor(name, tensor, checkpoints, tmp_path):
    directory = _copy_checkpoint(checkpoints[name][0], tmp_path / "ck", lambda t: t.pop(tensor))
    with pytest.raises(CheckpointError, match=f"missing tensor '{tensor}'"):
        models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)


def test_wrong_shape_tensor(checkpoints, tmp_path):
    tensor = "roformer.encoder.layer.1.intermediate.dense.weight"

    def edit(tensors):
        tensors[tensor] = tensors[tensor][:, :-1].copy()

    directory = _copy_checkpoint(checkpoints["roformer"][0], tmp_path / "ck", edit)
    with pytest.raises(CheckpointError, match=rf"'{tensor}' has shape \(52, 39\), expected \(52, 40\)"):
        models.load_model("roformer", checkpoint=directory, seq_len=SEQ_LEN)


def test_truncated_safetensors(checkpoints, tmp_path):
    directory = _copy_checkpoint(checkpoints["albert"][0], tmp_path / "ck")
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*corrupted or truncated"):
        models.load_model("albert", checkpoint=directory, seq_len=SEQ_LEN)


def test_config_without_a_size(checkpoints, tmp_path):
    directory = _copy_checkpoint(checkpoints["bert-base"][0], tmp_path / "ck")
    config = json.loads((directory / "config.json").read_text())
    del config["intermediate_size"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="lacks 'intermediate_size'"):
        models.load_model("bert-base", checkpoint=directory, seq_len=SEQ_LEN)


def _edit_config(source: Path, target: Path, edit) -> Path:
    """A copy of the checkpoint at ``source`` whose config.json is ``edit(config)`` (or the config, edited in place)."""
    directory = _copy_checkpoint(source, target)
    config = json.loads((directory / "config.json").read_text())
    edited = edit(config)
    (directory / "config.json").write_text(json.dumps(config if edited is None else edited))
    return directory


@pytest.mark.parametrize("name", list(CASES))
def test_config_that_is_not_a_json_object(name, checkpoints, tmp_path):
    directory = _edit_config(checkpoints[name][0], tmp_path / "ck", lambda config: [config])
    path = str(directory / "config.json")
    with pytest.raises(CheckpointError, match=re.escape(f"{path!r} is not a JSON object (it holds a list)")):
        models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)


@pytest.mark.parametrize("name, field, value, expected", [
    ("bert-base", "hidden_size", "40", "int"),
    ("bert-base", "num_hidden_layers", True, "int"),
    ("albert", "layer_norm_eps", "1e-12", "float"),
    ("albert", "num_hidden_groups", 2.0, "int"),
    ("roformer", "hidden_act", 1, "str"),
    ("roformer", "embedding_size", [24], "int"),
])
def test_config_field_with_a_wrong_type(name, field, value, expected, checkpoints, tmp_path):
    directory = _edit_config(checkpoints[name][0], tmp_path / "ck", lambda config: config.__setitem__(field, value))
    message = (f"{name} checkpoint {str(directory)!r}: config.json field {field!r} is {json.dumps(value)} "
               f"({type(value).__name__}), expected {expected}")
    with pytest.raises(CheckpointError, match=re.escape(message) + "$"):
        models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)


@pytest.mark.parametrize("name, key, value, message", [
    ("bert-base", "position_embedding_type", "relative_key", r'position_embedding_type = "relative_key".*only "absolute"'),
    ("albert", "is_decoder", True, r"is_decoder = true.*only false"),
    ("roformer", "rotary_value", True, r"rotary_value = true.*only false"),
    ("roformer", "hidden_sizes", [40], r"unknown key\(s\) \['hidden_sizes'\]"),
])
def test_config_key_that_changes_the_computation(name, key, value, message, checkpoints, tmp_path):
    directory = _edit_config(checkpoints[name][0], tmp_path / "ck", lambda config: config.__setitem__(key, value))
    with pytest.raises(CheckpointError, match=message):
        models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)


def test_config_keys_of_older_transformers_are_ignored(checkpoints, tmp_path):
    """Keys that transformers 4.x wrote (all-MiniLM-L6-v2's config.json has these) load as before."""
    older = {"_name_or_path": "nreimers/MiniLM-L6-H384-uncased", "gradient_checkpointing": False, "torch_dtype": "float32",
             "position_embedding_type": "absolute", "transformers_version": "4.8.2", "is_decoder": False, "pruned_heads": {}}
    directory = _edit_config(checkpoints["bert-base"][0], tmp_path / "ck", lambda config: config.update(older))
    model = models.load_model("bert-base", checkpoint=directory, seq_len=SEQ_LEN)
    assert model.config.hidden_size == SMALL["hidden_size"]


def test_seq_len_beyond_positions(checkpoints):
    with pytest.raises(ValueError, match="seq_len 384 must be in \\[1, max_position_embeddings = 64\\]"):
        models.load_model("bert-base", checkpoint=checkpoints["bert-base"][0])


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model 'bert-large'.*bert-base"):
        models.load_model("bert-large")


def test_unknown_config_field():
    with pytest.raises(TypeError, match="unknown config field.*hidden_layers.*num_hidden_layers"):
        models.load_model("albert", hidden_layers=2)


@pytest.fixture(scope="module")
def tiny_models():
    """Seeded models small enough for input checks."""
    sizes = dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=24, vocab_size=300,
                 seq_len=SEQ_LEN)
    return {name: models.load_model(name, **sizes) for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_inputs(name, tiny_models):
    model = tiny_models[name]
    good = model.sample_inputs(2, seed=0)
    model(good)
    with pytest.raises(InputError, match=f"input 'input_ids' has shape \\(2, 36\\), expected input_ids: int array of shape \\(batch, {SEQ_LEN}\\)"):
        model({**good, "input_ids": good["input_ids"][:, :-1]})
    with pytest.raises(InputError, match="input 'attention_mask' has dtype float32, expected int"):
        model({**good, "attention_mask": good["attention_mask"].astype(np.float32)})
    with pytest.raises(InputError, match=r"missing input\(s\) \['token_type_ids'\]"):
        model({k: v for k, v in good.items() if k != "token_type_ids"})
    with pytest.raises(InputError, match=r"input 'input_ids' has ids in \[\d+, 300\], expected \[0, 299\]"):
        model({**good, "input_ids": np.where(good["input_ids"] == good["input_ids"].max(), 300, good["input_ids"])})


# -- determinism and sample data -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_seeded_weights_and_samples_are_deterministic(name, tiny_models):
    again = models.load_model(name, **{k: getattr(tiny_models[name].config, k) for k in
                                       ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                                        "vocab_size", "seq_len")})
    first = tiny_models[name]
    assert first.params.keys() == again.params.keys()
    assert all(np.array_equal(first.params[k], again.params[k]) for k in first.params)
    other = models.load_model(name, seed=1, hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
                              intermediate_size=24, vocab_size=300, seq_len=SEQ_LEN)
    assert not np.array_equal(first.params["qa_outputs.weight" if name != "roformer" else "classifier.out_proj.weight"],
                              other.params["qa_outputs.weight" if name != "roformer" else "classifier.out_proj.weight"])
    a, b = first.sample_inputs(5, seed=4), again.sample_inputs(7, seed=4)
    for key in a:  # the first samples do not depend on the batch size
        np.testing.assert_array_equal(a[key], b[key][:5])
    assert not np.array_equal(a["input_ids"], first.sample_inputs(5, seed=5)["input_ids"])
    np.testing.assert_array_equal(first(a)[first.output_names[0]], first(a)[first.output_names[0]])


def test_squad_like_samples_at_full_size():
    """bert-base's samples: [CLS] question [SEP] context [SEP], lengths with mean ~172 clipped to [1, 384], Zipf ids."""
    model = models.load_model("bert-base", num_hidden_layers=1)
    inputs = model.sample_inputs(400, seed=0)
    ids, mask, segments = inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
    lengths = mask.sum(1)
    assert lengths.min() >= 1 and lengths.max() == 384 and 150 < lengths.mean() < 195
    assert np.all(mask[:, :-1] >= mask[:, 1:]), "padding only at the end"
    assert np.all(ids[mask == 0] == 0) and np.all(segments[mask == 0] == 0)
    assert np.all(ids[:, 0] == 101)
    long_rows = lengths >= 70
    assert np.all((ids[long_rows] == 102).sum(1) == 2), "two [SEP] per row"
    assert np.all(segments[np.arange(len(ids)), lengths - 1][long_rows] == 1)
    words = ids[(mask == 1) & (ids >= 999)]
    counts = np.bincount(words - 999)
    assert counts[0] > 10 * counts[100] > 0, "Zipf-like: the most frequent word is far more common than the 100th"


def test_roformer_pairs_share_the_first_text():
    model = models.load_model("roformer", num_hidden_layers=1)
    inputs = model.sample_inputs(6, seed=0)
    ids, segments = inputs["input_ids"], inputs["token_type_ids"]
    assert ids.shape == (6, 1024) and np.all(ids[:, 0] == 101)
    for pair in range(3):
        a, c = 2 * pair, 2 * pair + 1
        first_a = ids[a][segments[a] == 0]
        first_c = ids[c][segments[c] == 0]
        shorter = min(first_a.size, first_c.size)
        np.testing.assert_array_equal(first_a[:shorter - 1], first_c[:shorter - 1])  # same text A (cut may differ)
        assert not np.array_equal(ids[a][segments[a] == 1], ids[c][segments[c] == 1])  # B differs from C


@pytest.mark.parametrize("name", ["bert-base", "albert"])
def test_seeded_qa_head_finds_the_planted_answers(name):
    """The fitted span head acts as a trained one: on held-out rows (not the fitting seed) the FP32 best span is the planted
    answer, with the start and end logits standing well clear of every other context position."""
    from conformance.accuracy.metrics import best_spans, squad_context_mask
    from models import encoder

    model = models.load_model(name, num_hidden_layers=2, seq_len=128)
    inputs, answers = model.sample_examples(16, seed=3)
    assert encoder.SPAN_FIT_SEED != 3
    keep = answers[:, 0] >= 0  # rows too short for an answer have none
    inputs, answers = {k: v[keep] for k, v in inputs.items()}, answers[keep]
    rows = np.arange(len(answers))
    assert len(rows) >= 10
    outputs = model(inputs)
    context = squad_context_mask(inputs)
    np.testing.assert_array_equal(best_spans(outputs["start_logits"], outputs["end_logits"], context), answers)
    for key, column in (("start_logits", 0), ("end_logits", 1)):
        logits = np.where(context, outputs[key], -np.inf)
        at_answer = logits[rows, answers[:, column]]
        logits[rows, answers[:, column]] = -np.inf
        assert np.all(at_answer - logits.max(axis=1) > 2.0), f"{key}: margins {at_answer - logits.max(axis=1)}"


def test_planted_answers_sit_in_the_context():
    from models import text

    vocab = text.Vocabulary.for_model(30522, **text.BERT_VOCAB)
    opening, closing = text.answer_words(vocab)
    inputs, answers = text.squad_examples(200, 0, 384, vocab)
    ids, segments = inputs["input_ids"], inputs["token_type_ids"]
    has = answers[:, 0] >= 0
    rows = np.flatnonzero(has)
    assert has.mean() > 0.8 and np.all(segments[rows, answers[has, 0]] == 1)
    lengths = answers[has, 1] - answers[has, 0] + 1
    assert lengths.min() >= text.SQUAD_ANSWER_MIN and lengths.max() <= text.SQUAD_ANSWER_MAX
    assert np.all(ids[rows, answers[has, 1] + 1] != 0), "the answer ends before the context's [SEP]"
    assert np.all(np.isin(ids[rows, answers[has, 0]], opening)) and np.all(np.isin(ids[rows, answers[has, 1]], closing))
    assert np.isin(ids, np.r_[opening, closing]).sum() == 2 * has.sum(), "answer words occur only in the answers"
