"""The CAIL2019-SCM reader against independent oracles: its rows against transformers' fast tokenizer encoding each
pair with longest-first truncation, its pair_accuracy against a count from the torch outputs of a tiny
RoFormerForSequenceClassification, and bad input.

Fixtures are built here: triplets of Chinese-like texts (some longer than the sequence, some short), a WordPiece
tokenizer trained on them (CJK characters split one per token, as BERT's normaliser does), and a 2-layer RoFormer
checkpoint saved with save_pretrained. The numpy roformer loads the one-logit head (num_labels 1), its similarity score.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import models  # noqa: E402
from conformance.datasets import DatasetError, cail, load_dataset  # noqa: E402
from conformance.datasets.tokenizer import load_tokenizer  # noqa: E402

SEQ_LEN = 64
TRIPLETS = 16
CHARACTERS = [chr(0x4E00 + 37 * k) for k in range(120)] + list("，。；：")
TINY = dict(hidden_size=32, embedding_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=1)


def _text(rng, length: int) -> str:
    text = "".join(rng.choice(CHARACTERS, size=length))
    if rng.random() < 0.5:  # a case number, as the fact descriptions have
        cut = int(rng.integers(0, length))
        text = text[:cut] + f"（{int(rng.integers(2000, 2020))}）" + text[cut:]
    return text


def _triplets(seed: int = 0) -> list[dict]:
    """Texts from 8 to 90 characters: pairs that fit, pairs where one text is short, pairs where both are cut."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(TRIPLETS):
        lengths = rng.integers(8, 90, size=3) if t % 4 else rng.integers(8, 20, size=3)
        out.append({"A": _text(rng, int(lengths[0])), "B": _text(rng, int(lengths[1])),
                    "C": _text(rng, int(lengths[2])), "label": str(rng.choice(["B", "C"]))})
    return out


def _write_lines(path: Path, entries, blank_line_at: int | None = None) -> Path:
    lines = [json.dumps(e, ensure_ascii=False) for e in entries]
    if blank_line_at is not None:
        lines.insert(blank_line_at, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _train_tokenizer(texts, path: Path) -> Path:
    """The SQuAD tests' tokenizer builder (the same file on every run), 300 tokens."""
    from tests.test_dataset_squad import _train_tokenizer as wordpiece

    return wordpiece(texts, path, size=300)


def _randomize(module, seed: int) -> None:
    """Weights of order one (transformers' init gives nearly equal logits for every pair)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "embed_positions" in name:  # the fixed sinusoidal table
                continue
            scale = 0.1 if name.endswith("bias") else 1.0 / np.sqrt(param.shape[-1])
            base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            param.copy_(base + scale * torch.randn(param.shape, generator=generator))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("cail")
    triplets = _triplets()
    tokenizer_file = _train_tokenizer([e[k] for e in triplets for k in "ABC"], root / "tokenizer.json")
    vocab = tokenizers.Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    torch.manual_seed(0)
    reference = transformers.RoFormerForSequenceClassification(
        transformers.RoFormerConfig(vocab_size=vocab, **TINY)).eval()
    _randomize(reference, 0)
    checkpoint = root / "roformer"
    reference.save_pretrained(checkpoint)
    shutil.copy(tokenizer_file, checkpoint / "tokenizer.json")
    model = models.load_model("roformer", checkpoint=checkpoint, seq_len=SEQ_LEN)
    data = _write_lines(root / "test.json", triplets, blank_line_at=5)
    return {"triplets": triplets, "tokenizer": tokenizer_file, "checkpoint": checkpoint, "reference": reference,
            "model": model, "data": data}


def _hf_rows(tokenizer_file: Path, triplets):
    """(A,B),(A,C) per triplet from transformers' fast tokenizer, truncated longest-first and padded to SEQ_LEN."""
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), unk_token="[UNK]",
                                                pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]")
    firsts = [e["A"] for e in triplets for _ in range(2)]
    seconds = [e[k] for e in triplets for k in "BC"]
    encoded = fast(firsts, seconds, truncation="longest_first", max_length=SEQ_LEN, padding="max_length",
                   return_token_type_ids=True, return_tensors="np")
    return {key: encoded[key] for key in ("input_ids", "token_type_ids", "attention_mask")}


def test_rows_equal_the_fast_tokenizers_pair_encoding(world):
    evaluation = load_dataset("roformer", world["data"], world["model"], checkpoint=world["checkpoint"])
    expected = _hf_rows(world["tokenizer"], world["triplets"])
    assert set(evaluation.inputs) == {"input_ids", "token_type_ids", "attention_mask"}
    for key, value in expected.items():
        assert evaluation.inputs[key].dtype == np.int64
        assert np.array_equal(evaluation.inputs[key], value), key
    lengths = expected["attention_mask"].sum(axis=1)
    assert (lengths == SEQ_LEN).sum() >= 4 and (lengths < SEQ_LEN).sum() >= 4  # both cut and padded rows
    tokenizer = load_tokenizer(world["checkpoint"], "t")
    a_lengths = [len(e.ids) for e in tokenizer.encode([e["A"] for e in world["triplets"]])]
    cut_a = [2 * t for t in range(TRIPLETS) if (expected["token_type_ids"][2 * t] == 0).sum() - 2 < a_lengths[t]]
    assert cut_a, "no row truncates the first text"


@pytest.mark.parametrize("first, second, room, expected", [
    (10, 20, 40, (10, 20)),  # fits
    (5, 50, 40, (5, 35)),  # the short one keeps its length
    (50, 5, 40, (35, 5)),
    (30, 30, 41, (20, 21)),  # both cut: the second takes the odd token
    (31, 30, 41, (21, 20)),
    (30, 31, 41, (20, 21)),
    (20, 25, 41, (20, 21)),
])
def test_truncation_is_tokenizers_longest_first(world, first, second, room, expected):
    assert cail.truncated_lengths(first, second, room) == expected
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(world["tokenizer"]), cls_token="[CLS]",
                                                sep_token="[SEP]", unk_token="[UNK]", pad_token="[PAD]")
    vocab = fast.get_vocab()
    one, two = sorted(t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff")[:2]
    encoded = fast(one * first, two * second, truncation="longest_first", max_length=room + 3)["input_ids"]
    assert (encoded.count(vocab[one]), encoded.count(vocab[two])) == expected


def test_pair_accuracy_equals_a_count_from_torch(world):
    evaluation = load_dataset("roformer", world["data"], world["model"], checkpoint=world["checkpoint"])
    rows = _hf_rows(world["tokenizer"], world["triplets"])
    with torch.no_grad():
        logits = world["reference"](**{k: torch.from_numpy(v) for k, v in rows.items()}).logits.numpy()
    predicted = ["B" if logits[2 * t, 0] > logits[2 * t + 1, 0] else "C" for t in range(TRIPLETS)]
    right = [p == e["label"] for p, e in zip(predicted, world["triplets"])]
    outputs = world["model"](evaluation.inputs)
    assert np.allclose(outputs["logits"], logits, atol=1e-4)  # numpy roformer = torch on the same rows
    metrics = evaluation.label_metrics(outputs)
    assert set(metrics) == {"pair_accuracy"}
    assert metrics["pair_accuracy"].units == TRIPLETS == evaluation.units
    assert np.array_equal(metrics["pair_accuracy"].scores, np.array(right, float))
    assert metrics["pair_accuracy"].value == sum(right) / TRIPLETS
    assert 0 < sum(right) < TRIPLETS


def test_two_logit_heads_score_by_the_similar_class(world):
    evaluation = cail.load(world["data"], world["model"], checkpoint=world["checkpoint"], limit=2)
    # logits (dissimilar, similar): triplet 0 prefers B (2 > -1), triplet 1 prefers C (1.5 - 1 < 3)
    logits = np.array([[0.0, 2.0], [0.0, -1.0], [1.0, 1.5], [0.0, 3.0]])
    labels = [e["label"] for e in world["triplets"][:2]]
    expected = [labels[0] == "B", labels[1] == "C"]
    assert list(evaluation.label_metrics({"logits": logits})["pair_accuracy"].scores) == expected


def test_provenance_and_limit(world):
    evaluation = cail.load(world["data"], world["model"], checkpoint=world["checkpoint"])
    prov = evaluation.provenance
    labels = [e["label"] for e in world["triplets"]]
    share_b = round(100 * labels.count("B") / TRIPLETS)
    assert prov["format"] == "cail2019-scm" and prov["path"] == str(world["data"]) and len(prov["sha256"]) == 64
    assert prov["units"] == TRIPLETS and prov["rows"] == 2 * TRIPLETS
    assert prov["labels"] == f"B {share_b}%, C {round(100 * labels.count('C') / TRIPLETS)}%"
    assert prov["preprocessing"]["max_seq_len"] == SEQ_LEN
    assert prov["preprocessing"]["tokenizer"] == "tokenizer.json"
    digest = hashlib.sha256((world["checkpoint"] / "tokenizer.json").read_bytes()).hexdigest()
    assert prov["preprocessing"]["tokenizer_sha256"] == digest
    first = cail.load(world["data"], world["model"], checkpoint=world["checkpoint"], limit=5)
    assert first.units == 5 and first.provenance["rows"] == 10
    for key, value in first.inputs.items():
        assert np.array_equal(value, evaluation.inputs[key][:10]), key


# -- bad input ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    ('{"A": "x", "B": "y", "C": "z", "label": "D"}', r'label "D" is not "B" or "C"'),
    ('{"A": "x", "B": "y", "C": "z", "label": ', r"not valid JSON"),
    ('{"A": "x", "B": "y", "label": "B"}', r'missing "C"'),
    ('{"A": "x", "B": 3, "C": "z", "label": "B"}', r"B is 3, expected a string"),
    ('["x", "y", "z", "B"]', r"expected a JSON object"),
])
def test_bad_lines_name_file_and_line(world, tmp_path, line, message):
    lines = [json.dumps(e, ensure_ascii=False) for e in world["triplets"][:4]]
    lines.insert(2, line)
    path = tmp_path / "test.json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"{path}:3: {message}"):
        cail.load(path, world["model"], checkpoint=world["checkpoint"])


def test_no_tokenizer(world, tmp_path):
    with pytest.raises(DatasetError, match=r"CAIL2019-SCM 'test\.json' data set needs the checkpoint's tokenizer: "
                                           r"pass --checkpoint MODEL=DIR"):
        cail.load(world["data"], world["model"])
    with pytest.raises(DatasetError, match=r"holds neither"):
        cail.load(world["data"], world["model"], checkpoint=tmp_path)


def test_token_ids_beyond_the_vocabulary(world, tmp_path):
    small = transformers.RoFormerForSequenceClassification(transformers.RoFormerConfig(**{**TINY, "vocab_size": 20}))
    small.save_pretrained(tmp_path)
    shutil.copy(world["tokenizer"], tmp_path / "tokenizer.json")
    model = models.load_model("roformer", checkpoint=tmp_path, seq_len=SEQ_LEN)
    with pytest.raises(DatasetError, match=r"tokenizer\.json' gives token id \d+ .*beyond the roformer model's "
                                           r"vocab_size 20"):
        cail.load(world["data"], model, checkpoint=tmp_path)


def test_empty_file(world, tmp_path):
    path = tmp_path / "test.json"
    path.write_text("\n\n")
    with pytest.raises(DatasetError, match=r"no triplets"):
        cail.load(path, world["model"], checkpoint=world["checkpoint"])
