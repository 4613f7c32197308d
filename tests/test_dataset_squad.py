"""The SQuAD v1.1 reader against independent oracles: its windows against transformers' fast tokenizer with
overflowing windows, its answers and EM/F1 against tiny transformers QA models post-processed as transformers'
``postprocess_qa_predictions`` and scored by the official ``evaluate-v1.1.py`` (both written out below), and bad input.

Fixtures are built here: contexts long enough for several windows at seq_len 128, a WordPiece tokenizer trained on
them, and 2-layer BertForQuestionAnswering / AlbertForQuestionAnswering checkpoints saved with save_pretrained.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import shutil
import string
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import models  # noqa: E402
from conformance.datasets import DatasetError, load_dataset, squad  # noqa: E402
from conformance.datasets.tokenizer import load_tokenizer  # noqa: E402

SEQ_LEN = 128
STRIDE = 48  # a step between window starts that gives 2-4 overlapping windows per long context at SEQ_LEN
WORDS = ("river city bridge tower market garden castle museum library station harbor valley forest mountain island "
         "north south king queen army treaty war peace trade grain salt wool iron gold silver copper merchant "
         "council bishop church school college painter poet music theatre café naïve empire republic province "
         "century decade winter summer spring autumn storm flood fire plague census road canal railway").split()
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


# -- fixtures ----------------------------------------------------------------------------------------------------------
def _sentence(rng) -> str:
    words = [str(rng.choice(WORDS)) for _ in range(int(rng.integers(5, 14)))]
    if rng.random() < 0.4:
        words.insert(int(rng.integers(0, len(words))), str(int(rng.integers(1000, 2000))))
    if rng.random() < 0.3:
        words[int(rng.integers(1, len(words)))] += ","
    text = " ".join(words)
    return text[0].upper() + text[1:] + str(rng.choice([".", ".", "!", ";"]))


def _paragraphs(seed: int = 0):
    """(context, [questions]) of four paragraphs: one short (one window), three of ~120-230 tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for sentences, asked in ((3, 2), (14, 3), (20, 2), (24, 3)):
        context = " ".join(_sentence(rng) for _ in range(sentences))
        questions = [f"Which {' '.join(rng.choice(WORDS, size=int(rng.integers(2, 6))))} of the {rng.choice(WORDS)}?"
                     for _ in range(asked)]
        out.append((context, questions))
    return out


def _squad_document(paragraphs, answers=None) -> dict:
    """A SQuAD v1.1 document; ``answers`` maps question id -> answer texts (a placeholder answer otherwise)."""
    answers = answers or {}
    data = []
    for p, (context, questions) in enumerate(paragraphs):
        qas = []
        for q, question in enumerate(questions):
            qid = f"q{p}-{q}"
            texts = answers.get(qid, [context.split()[0]])
            qas.append({"id": qid, "question": question,
                        "answers": [{"text": t, "answer_start": max(context.find(t), 0)} for t in texts]})
        data.append({"title": f"article {p // 2}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "1.1", "data": data}


def _train_tokenizer(texts, path: Path, size: int = 400) -> Path:
    """A BERT-style WordPiece tokenizer of ``texts``, the same file on every run: the four special tokens, every
    character alone and as a continuation (``##c``), then the most frequent words (ties by the word) up to ``size``
    tokens. (tokenizers' WordPieceTrainer orders tied counts differently from one process to the next, so a trained
    vocabulary, and the checkpoint built on it, would differ between runs.)"""
    normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    counts = collections.Counter(word for text in texts
                                 for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for word in counts for c in word})
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", *chars, *("##" + c for c in chars)]
    words = [w for w in sorted(counts, key=lambda w: (-counts[w], w)) if w not in pieces]
    vocab = pieces + words[:max(0, size - len(pieces))]
    tok = tokenizers.Tokenizer(tokenizers.models.WordPiece({token: i for i, token in enumerate(vocab)},
                                                           unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.post_processor = tokenizers.processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                              ("[CLS]", tok.token_to_id("[CLS]")))
    tok.save(str(path))
    return path


def _randomize(module, seed: int) -> None:
    """Weights of order one (transformers' init gives nearly flat logits, where near-ties would decide the spans)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            scale = 0.1 if name.endswith("bias") else 1.0 / np.sqrt(param.shape[-1])
            base = 1.0 if name.endswith(("LayerNorm.weight", "layer_norm.weight")) else 0.0
            param.copy_(base + scale * torch.randn(param.shape, generator=generator))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The paragraphs, the tokenizer file, and per model (bert-base, albert) its checkpoint dir and torch model."""
    root = tmp_path_factory.mktemp("squad")
    paragraphs = _paragraphs()
    texts = [c for c, _ in paragraphs] + [q for _, qs in paragraphs for q in qs]
    tokenizer_file = _train_tokenizer(texts, root / "tokenizer.json")
    vocab = tokenizers.Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    cases = {
        "bert-base": (transformers.BertConfig(vocab_size=vocab, **TINY), transformers.BertForQuestionAnswering),
        "albert": (transformers.AlbertConfig(vocab_size=vocab, embedding_size=16, **TINY),
                   transformers.AlbertForQuestionAnswering),
    }
    checkpoints = {}
    for seed, (name, (config, model_cls)) in enumerate(cases.items()):
        torch.manual_seed(seed)
        model = model_cls(config).eval()
        _randomize(model, seed)
        directory = root / name
        model.save_pretrained(directory)
        shutil.copy(tokenizer_file, directory / "tokenizer.json")
        checkpoints[name] = (directory, model)
    return {"paragraphs": paragraphs, "tokenizer": tokenizer_file, "checkpoints": checkpoints, "root": root}


def _fast_tokenizer(path: Path):
    return transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]")


# -- oracle: transformers' windows -------------------------------------------------------------------------------------
def _hf_features(fast, paragraphs, seq_len: int, doc_stride: int):
    """Per question in file order: transformers' overflowing windows, with offsets of context tokens only (else None),
    as run_qa.py's prepare_validation_features builds them. The overlap that gives run_squad.py's step of
    ``doc_stride`` is ``max_doc - doc_stride`` (0 when the window is shorter than the step)."""
    features = []
    for context, questions in paragraphs:
        for question in questions:
            query_len = len(fast(question, add_special_tokens=False)["input_ids"])
            max_doc = seq_len - query_len - 3
            encoded = fast(question, context, truncation="only_second", max_length=seq_len,
                           stride=max(max_doc - doc_stride, 0), return_overflowing_tokens=True,
                           return_offsets_mapping=True, return_token_type_ids=True, padding="max_length")
            windows = []
            for i in range(len(encoded["input_ids"])):
                sequence_ids = encoded.sequence_ids(i)
                offsets = [o if sequence_ids[k] == 1 else None for k, o in enumerate(encoded["offset_mapping"][i])]
                windows.append({key: encoded[key][i] for key in ("input_ids", "token_type_ids", "attention_mask")}
                               | {"offset_mapping": offsets, "context": context})
            features.append(windows)
    return features


# -- oracle: transformers' postprocess_qa_predictions (examples/pytorch/question-answering/utils_qa.py) --------------
def _postprocess_qa_predictions(features_per_question, all_start_logits, all_end_logits, n_best_size=20,
                                max_answer_length=30):
    predictions = []
    feature_index = 0
    for windows in features_per_question:
        prelim_predictions = []
        context = windows[0]["context"]
        for feature in windows:
            start_logits = all_start_logits[feature_index]
            end_logits = all_end_logits[feature_index]
            feature_index += 1
            offset_mapping = feature["offset_mapping"]
            start_indexes = np.argsort(start_logits)[-1: -n_best_size - 1: -1].tolist()
            end_indexes = np.argsort(end_logits)[-1: -n_best_size - 1: -1].tolist()
            for start_index in start_indexes:
                for end_index in end_indexes:
                    if (start_index >= len(offset_mapping) or end_index >= len(offset_mapping)
                            or offset_mapping[start_index] is None or len(offset_mapping[start_index]) < 2
                            or offset_mapping[end_index] is None or len(offset_mapping[end_index]) < 2):
                        continue
                    if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim_predictions.append({
                        "offsets": (offset_mapping[start_index][0], offset_mapping[end_index][1]),
                        "score": start_logits[start_index] + end_logits[end_index]})
        ranked = sorted(prelim_predictions, key=lambda x: x["score"], reverse=True)[:n_best_size]
        for pred in ranked:
            pred["text"] = context[pred["offsets"][0]: pred["offsets"][1]]
        if len(ranked) == 0 or (len(ranked) == 1 and ranked[0]["text"] == ""):
            ranked.insert(0, {"text": "empty", "score": 0.0})
        predictions.append(ranked[0]["text"])
    return predictions


# -- oracle: the official SQuAD v1.1 evaluate-v1.1.py ------------------------------------------------------------------
def normalize_answer(s):
    """Lower text and remove punctuation, articles and extra whitespace."""
    def remove_articles(text):
        return re.sub(r'\b(a|an|the)\b', ' ', text)

    def white_space_fix(text):
        return ' '.join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def f1_score(prediction, ground_truth):
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def exact_match_score(prediction, ground_truth):
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    scores_for_ground_truths = []
    for ground_truth in ground_truths:
        score = metric_fn(prediction, ground_truth)
        scores_for_ground_truths.append(score)
    return max(scores_for_ground_truths)


def evaluate(dataset, predictions):
    """Per question (file order): (exact match, F1) as fractions (the official script sums them and reports 100 x
    the mean)."""
    scores = []
    for article in dataset:
        for paragraph in article['paragraphs']:
            for qa in paragraph['qas']:
                ground_truths = list(map(lambda x: x['text'], qa['answers']))
                prediction = predictions[qa['id']]
                scores.append((metric_max_over_ground_truths(exact_match_score, prediction, ground_truths),
                               metric_max_over_ground_truths(f1_score, prediction, ground_truths)))
    return scores


# -- windows -----------------------------------------------------------------------------------------------------------
def _questions(paragraphs):
    return [squad.Question(f"q{p}-{q}", question, context, ("x",), f"data[{p}]")
            for p, (context, questions) in enumerate(paragraphs) for q, question in enumerate(questions)]


@pytest.mark.parametrize("doc_stride", [STRIDE, squad.DOC_STRIDE])
def test_windows_equal_transformers_overflowing_windows(world, doc_stride):
    paragraphs = world["paragraphs"]
    tokenizer = load_tokenizer(world["checkpoints"]["bert-base"][0], "test")
    windows = squad.make_windows(_questions(paragraphs), tokenizer, SEQ_LEN, doc_stride=doc_stride)
    expected = _hf_features(_fast_tokenizer(world["tokenizer"]), paragraphs, SEQ_LEN, doc_stride)
    counts = [len(w) for w in expected]
    assert np.array_equal(np.bincount(windows.question), counts)
    assert max(counts) >= 3 and min(counts) == 1  # one-window and several-window contexts
    flat = [w for question in expected for w in question]
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert np.array_equal(windows.inputs[key], np.array([w[key] for w in flat])), key
        assert windows.inputs[key].dtype == np.int64
    for row, window in enumerate(flat):
        context = window["offset_mapping"]
        mine = [tuple(o) if o[0] >= 0 else None for o in windows.offsets[row].tolist()]
        assert mine == [None if o is None else tuple(o) for o in context], f"offsets of row {row}"


def test_window_starts_step_by_the_stride_and_end_at_the_end():
    assert squad.window_starts(300, 100, 128) == [0, 100, 200]
    assert squad.window_starts(300, 100, 48) == [0, 48, 96, 144, 192, 240]  # 192 + 100 < 300
    assert squad.window_starts(100, 100, 48) == [0]
    assert squad.window_starts(101, 100, 48) == [0, 48]


def test_long_questions_are_cut_to_max_query_len(world):
    tokenizer = load_tokenizer(world["checkpoints"]["bert-base"][0], "test")
    context, _ = world["paragraphs"][1]
    question = squad.Question("long", " ".join(WORDS[:40]) + "?", context, ("x",), "data[0]")
    query = tokenizer.encode([question.question])[0].ids
    assert len(query) > 20
    windows = squad.make_windows([question], tokenizer, SEQ_LEN, doc_stride=STRIDE, max_query_len=20)
    assert np.array_equal(windows.inputs["input_ids"][:, 1:21], np.tile(query[:20], (windows.rows, 1)))
    assert (windows.inputs["input_ids"][:, 21] == tokenizer.sep_id).all()
    assert (windows.inputs["token_type_ids"][:, 22] == 1).all()


def test_vocab_txt_tokenizer_gives_the_same_rows(world, tmp_path):
    vocab = tokenizers.Tokenizer.from_file(str(world["tokenizer"])).get_vocab()
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    questions = _questions(world["paragraphs"])
    reference = squad.make_windows(questions, load_tokenizer(world["checkpoints"]["bert-base"][0], "t"), SEQ_LEN)
    from_vocab = squad.make_windows(questions, load_tokenizer(tmp_path, "t"), SEQ_LEN)
    assert np.array_equal(from_vocab.inputs["input_ids"], reference.inputs["input_ids"])
    assert np.array_equal(from_vocab.offsets, reference.offsets)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    cased = squad.make_windows(questions, load_tokenizer(tmp_path, "t"), SEQ_LEN)
    unk = vocab["[UNK]"]
    assert (cased.inputs["input_ids"] == unk).sum() > (reference.inputs["input_ids"] == unk).sum()


# -- answers and EM/F1 against transformers + the official script ------------------------------------------------------
def _torch_logits(model, features):
    flat = [w for question in features for w in question]
    inputs = {key: torch.tensor([w[key] for w in flat]) for key in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = model(**inputs)
    return out.start_logits.numpy(), out.end_logits.numpy()


def _gold_answers(paragraphs, predictions):
    """Ground truths that are spans of their contexts (as SQuAD's are), mixing exact hits (the predicted span, and a
    span elsewhere beside it), partial overlaps (the predicted span and the context's next words) and misses (the
    context's last words), so that EM and F1 are neither 0 nor 1."""
    contexts = [context for context, questions in paragraphs for _ in questions]
    ids = [f"q{p}-{q}" for p, (_, qs) in enumerate(paragraphs) for q in range(len(qs))]
    answers = {}
    for i, (qid, predicted, context) in enumerate(zip(ids, predictions, contexts)):
        start = context.find(predicted) if predicted != "empty" else -1
        last = " ".join(context.split()[-2:])
        if start < 0:
            answers[qid] = [last]
        elif i % 3 == 0:
            answers[qid] = [last, predicted]
        elif i % 3 == 1:
            after = re.match(r"\s*\S+\s+\S+", context[start + len(predicted):])
            answers[qid] = [context[start:start + len(predicted) + (after.end() if after else 0)]]
        else:
            answers[qid] = [last]
    return answers


@pytest.mark.parametrize("name", ["bert-base", "albert"])
def test_em_f1_equal_transformers_postprocessing_and_official_scoring(world, name, tmp_path, monkeypatch):
    monkeypatch.setattr(squad, "DOC_STRIDE", STRIDE)  # overlapping windows at the small seq_len
    directory, reference = world["checkpoints"][name]
    paragraphs = world["paragraphs"]
    features = _hf_features(_fast_tokenizer(world["tokenizer"]), paragraphs, SEQ_LEN, STRIDE)
    start, end = _torch_logits(reference, features)
    predictions = _postprocess_qa_predictions(features, start, end)
    assert sum(p != "empty" for p in predictions) >= len(predictions) - 1
    document = _squad_document(paragraphs, _gold_answers(paragraphs, predictions))
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(document, indent=1))
    expected = evaluate(document["data"], dict(zip([qa["id"] for a in document["data"] for p in a["paragraphs"]
                                                     for qa in p["qas"]], predictions)))

    model = models.load_model(name, checkpoint=directory, seq_len=SEQ_LEN)
    evaluation = load_dataset(name, path, model, checkpoint=directory)
    outputs = model(evaluation.inputs)
    assert np.allclose(outputs["start_logits"], start, atol=1e-4)  # numpy model = torch on the same rows
    assert np.allclose(outputs["end_logits"], end, atol=1e-4)
    questions = squad.read_questions(path)
    windows = squad.make_windows(questions, load_tokenizer(directory, "t"), SEQ_LEN, doc_stride=STRIDE)
    assert squad.predict_answers(windows, questions, outputs["start_logits"], outputs["end_logits"]) == predictions

    metrics = evaluation.label_metrics(outputs)
    assert set(metrics) == {"squad_exact_match", "squad_f1"}
    em, f1 = (np.array(column, float) for column in zip(*expected))
    assert metrics["squad_exact_match"].units == len(questions) == evaluation.units
    assert np.array_equal(metrics["squad_exact_match"].scores, em)
    assert np.allclose(metrics["squad_f1"].scores, f1, rtol=0, atol=1e-12)
    assert 0 < metrics["squad_exact_match"].value < metrics["squad_f1"].value < 1
    assert metrics["squad_exact_match"].value == pytest.approx(em.mean())


def test_provenance_and_limit(world, tmp_path):
    directory, _ = world["checkpoints"]["bert-base"]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_squad_document(world["paragraphs"])))
    model = models.load_model("bert-base", checkpoint=directory, seq_len=SEQ_LEN)
    full = squad.load(path, model, checkpoint=directory)
    prov = full.provenance
    assert prov["format"] == "squad-v1.1" and prov["path"] == str(path) and len(prov["sha256"]) == 64
    assert prov["units"] == full.units == sum(len(qs) for _, qs in world["paragraphs"])
    assert prov["rows"] == len(full.inputs["input_ids"]) > full.units
    assert prov["labels"] == f"{full.units} questions with answers"
    pre = prov["preprocessing"]
    assert (pre["max_seq_len"], pre["doc_stride"], pre["max_query_len"], pre["n_best"], pre["max_answer_len"]) == \
        (SEQ_LEN, 128, 64, 20, 30)
    assert pre["tokenizer"] == "tokenizer.json"
    assert pre["tokenizer_sha256"] == hashlib.sha256((directory / "tokenizer.json").read_bytes()).hexdigest()
    assert {k: v.shape for k, v in full.inputs.items()} == {
        k: (prov["rows"], SEQ_LEN) for k in ("input_ids", "attention_mask", "token_type_ids")}
    model.validate_inputs(full.inputs)

    first = squad.load(path, model, checkpoint=directory, limit=3)
    assert first.units == 3 and first.provenance["labels"] == "3 questions with answers"
    rows = first.provenance["rows"]
    assert np.array_equal(first.inputs["input_ids"], full.inputs["input_ids"][:rows])


# -- bad input ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def bert(world):
    directory, _ = world["checkpoints"]["bert-base"]
    return directory, models.load_model("bert-base", checkpoint=directory, seq_len=SEQ_LEN)


def test_json_syntax_error_names_the_line(bert, tmp_path, world):
    directory, model = bert
    text = json.dumps(_squad_document(world["paragraphs"]), indent=1).splitlines()
    line = next(i for i, t in enumerate(text) if '"question"' in t)
    text[line] = text[line].rstrip(",")  # a missing comma
    path = tmp_path / "dev.json"
    path.write_text("\n".join(text))
    with pytest.raises(DatasetError, match=rf"dev\.json:{line + 2}: not valid JSON"):
        squad.load(path, model, checkpoint=directory)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["data"][1]["paragraphs"][0]["qas"][2].pop("question"),
     r'data\[1\]\.paragraphs\[0\]\.qas\[2\]: missing "question"'),
    (lambda d: d["data"][2]["paragraphs"][0].pop("context"), r'data\[2\]\.paragraphs\[0\]: missing "context"'),
    (lambda d: d.pop("data"), r'the top level: missing "data"'),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].pop("text"),
     r'data\[0\]\.paragraphs\[0\]\.qas\[1\]\.answers\[0\]: missing "text"'),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].update(id=7), r"qas\[1\]\.id: expected a string, got a number"),
    (lambda d: d["data"][3]["paragraphs"][0]["qas"][0].update(answers=[]), r"qas\[0\]: no answers"),
    (lambda d: d["data"][3]["paragraphs"][0]["qas"][1].update(id="q0-0"), r"id 'q0-0' is also the id of data\[0\]"),
])
def test_malformed_entries_name_their_json_path(bert, tmp_path, world, edit, message):
    directory, model = bert
    document = _squad_document(world["paragraphs"])
    edit(document)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(document))
    with pytest.raises(DatasetError, match=message) as info:
        squad.load(path, model, checkpoint=directory)
    assert str(path) in str(info.value)


def test_no_tokenizer(bert, tmp_path, world):
    directory, model = bert
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_squad_document(world["paragraphs"])))
    with pytest.raises(DatasetError, match=r"needs the checkpoint's tokenizer: pass --checkpoint MODEL=DIR .*"
                                           r"tokenizer\.json or vocab\.txt \(no checkpoint given\)"):
        squad.load(path, model)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(DatasetError, match=r"holds neither"):
        squad.load(path, model, checkpoint=bare)
    (bare / "tokenizer.json").write_text("{not a tokenizer")
    with pytest.raises(DatasetError, match=r"tokenizer\.json.* is not a tokenizers tokenizer file"):
        squad.load(path, model, checkpoint=bare)


@pytest.mark.parametrize("config, pad", [
    ({"pad_token": "[UNK]"}, "[UNK]"),
    ({"pad_token": {"content": "[SEP]", "lstrip": False}}, "[SEP]"),
    ({}, "[PAD]"),
])
def test_special_tokens_from_tokenizer_config(world, tmp_path, config, pad):
    shutil.copy(world["tokenizer"], tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = load_tokenizer(tmp_path, "t")
    vocab = tokenizers.Tokenizer.from_file(str(world["tokenizer"])).get_vocab()
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id) == (vocab["[CLS]"], vocab["[SEP]"], vocab[pad])
    windows = squad.make_windows(_questions(world["paragraphs"][:1]), tokenizer, SEQ_LEN)
    assert (windows.inputs["input_ids"][windows.inputs["attention_mask"] == 0] == vocab[pad]).all()


def test_special_token_missing_from_the_vocabulary(world, tmp_path):
    shutil.copy(world["tokenizer"], tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"cls_token": "<s>"}))
    with pytest.raises(DatasetError, match=r"tokenizer\.json' has no cls_token '<s>' \(named in tokenizer_config"):
        load_tokenizer(tmp_path, "t")


def test_token_ids_beyond_the_vocabulary(world, tmp_path):
    small = transformers.BertForQuestionAnswering(transformers.BertConfig(vocab_size=30, **TINY))
    small.save_pretrained(tmp_path / "small")
    shutil.copy(world["tokenizer"], tmp_path / "small" / "tokenizer.json")
    model = models.load_model("bert-base", checkpoint=tmp_path / "small", seq_len=SEQ_LEN)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_squad_document(world["paragraphs"])))
    with pytest.raises(DatasetError, match=r"tokenizer '.*tokenizer\.json' gives token id \d+ .*beyond the bert-base "
                                           r"model's vocab_size 30"):
        squad.load(path, model, checkpoint=tmp_path / "small")


def test_scorer_refuses_outputs_of_other_rows(bert, tmp_path, world):
    directory, model = bert
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_squad_document(world["paragraphs"])))
    evaluation = squad.load(path, model, checkpoint=directory, limit=2)
    rows = evaluation.provenance["rows"]
    with pytest.raises(ValueError, match=rf"expected \({rows}, {SEQ_LEN}\)"):
        evaluation.label_metrics({name: np.zeros((rows + 1, SEQ_LEN)) for name in ("start_logits", "end_logits")})
