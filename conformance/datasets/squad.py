"""SQuAD v1.1 (``dev-v1.1.json`` layout) for bert-base and albert, read with the checkpoint's tokenizer.

Preprocessing is MLPerf's (Google's ``run_squad.py``): the question is cut to MAX_QUERY_LEN tokens; the context is
split into windows of at most ``seq_len - len(question) - 3`` tokens whose starts are DOC_STRIDE tokens apart (or one
window length, when that is shorter), the last window ending at the end of the context; each window is one row
``[CLS] question [SEP] window [SEP]`` with token_type_ids 0 then 1, padded to the model's ``seq_len`` with the
tokenizer's pad token.

Answers are read as transformers' QA post-processing (``postprocess_qa_predictions``) reads them: in every window of a
question, the N_BEST highest start logits and the N_BEST highest end logits (over the whole row) give candidate spans,
kept when both ends are context tokens of that window, end >= start and the span is at most MAX_ANSWER_LEN tokens
(Google's code further keeps only starts in the window where the token has its maximum context; this does not); the
span of the highest start + end logit over all windows is the answer, cut from the context with the tokenizer's
character offsets (the first such span in window order on a tie; NO_ANSWER when no window has a valid span, as in both
reference implementations). Exact match and F1 are those of the official ``evaluate-v1.1.py``: answers normalised
(lowercase, no punctuation, no articles a/an/the, single spaces), the maximum over the ground-truth answers, per
question.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from boundedio import load_json
from conformance.accuracy.metrics import MAX_ANSWER_TOKENS, MetricError, mean_metric, squad_f1
from conformance.datasets.base import (
    MAX_JSON_BYTES,
    DatasetError,
    EvaluationSet,
    check_input_size,
    expect_file,
    sha256_files,
)
from conformance.datasets.tokenizer import TextTokenizer, load_tokenizer

FORMAT = "squad-v1.1"
MAX_QUERY_LEN = 64  # question tokens kept (MLPerf's max_query_length)
DOC_STRIDE = 128  # tokens between the starts of consecutive windows of a context (MLPerf's doc_stride)
N_BEST = 20  # start and end candidates per window (n_best_size)
MAX_ANSWER_LEN = MAX_ANSWER_TOKENS  # 30 tokens (max_answer_length)
NO_ANSWER = "empty"  # the answer of a question without a valid span in any window (run_squad.py, transformers)


@dataclass(frozen=True)
class Question:
    """One question with its context and ground-truth answer texts; ``where`` is its JSON path in the file."""

    id: str
    question: str
    context: str
    answers: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Windows:
    """The model rows of a list of questions: ``inputs`` (rows, seq_len) int64, ``question`` (rows,) the index of the
    question each row belongs to, ``offsets`` (rows, seq_len, 2) the character span of each context token in its
    question's context, -1 for every other position (question, special tokens, padding)."""

    inputs: dict[str, np.ndarray]
    question: np.ndarray
    offsets: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.question)


# -- reading the file -------------------------------------------------------------------------------------------------
def read_questions(path) -> list[Question]:
    """Every question of a SQuAD v1.1 file, in file order; a DatasetError naming the file and the JSON path of the
    first malformed entry (a JSON syntax error with its line). The file is a regular file of at most
    :data:`MAX_JSON_BYTES`; every answer's span lies in its context (see :func:`_check_answer`)."""
    path = Path(path)
    document = load_json(path, "a SQuAD v1.1 JSON file", MAX_JSON_BYTES, DatasetError)
    data = _field(path, document, "data", list, "")
    questions: list[Question] = []
    seen: dict[str, str] = {}
    for i, article in enumerate(data):
        for j, paragraph in enumerate(_field(path, article, "paragraphs", list, f"data[{i}]")):
            where = f"data[{i}].paragraphs[{j}]"
            context = _field(path, paragraph, "context", str, where)
            for k, qa in enumerate(_field(path, paragraph, "qas", list, where)):
                question = _read_question(path, qa, context, f"{where}.qas[{k}]")
                if question.id in seen:
                    raise DatasetError(f"{path}: {question.where}: id {question.id!r} is also the id of "
                                       f"{seen[question.id]} (question ids must be unique)")
                seen[question.id] = question.where
                questions.append(question)
    if not questions:
        raise DatasetError(f"{path}: no questions (expected SQuAD v1.1: data[].paragraphs[].qas[])")
    return questions


def _field(path: Path, entry, key: str, kind: type, where: str):
    if not isinstance(entry, dict):
        raise DatasetError(f"{path}: {where or 'the top level'}: expected a JSON object, got {_json_type(entry)}")
    if key not in entry:
        raise DatasetError(f"{path}: {where or 'the top level'}: missing {json.dumps(key)}")
    value = entry[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = {list: "a list", str: "a string", int: "an integer"}[kind]
        raise DatasetError(f"{path}: {where + '.' if where else ''}{key}: expected {expected}, got {_json_type(value)}")
    return value


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _read_question(path: Path, qa, context: str, where: str) -> Question:
    question_id = _field(path, qa, "id", str, where)
    question = _field(path, qa, "question", str, where)
    answers = _field(path, qa, "answers", list, where)
    if not answers:
        raise DatasetError(f"{path}: {where}: no answers (SQuAD v1.1 questions have at least one; SQuAD v2.0's "
                           "unanswerable questions are not supported)")
    texts = []
    for a, answer in enumerate(answers):
        text = _field(path, answer, "text", str, f"{where}.answers[{a}]")
        start = _field(path, answer, "answer_start", int, f"{where}.answers[{a}]")
        _check_answer(path, f"{where}.answers[{a}]", question_id, context, text, start)
        texts.append(text)
    return Question(question_id, question, context, tuple(texts), where)


def _check_answer(path: Path, where: str, question_id: str, context: str, text: str, start: int) -> None:
    """A SQuAD v1.1 answer is a span of its context: a non-empty text that the context holds, character for
    character, from ``answer_start`` on. An empty answer, a start before the context, a span past its end, or a text
    that is not what the context holds there is a DatasetError naming the file, the JSON path of the answer, the
    question id and the answer (and, for a text that differs, what the context holds at that place)."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    about = f"{path}: {where}: question {question_id!r}, answer {shown!r} at answer_start {start}"
    if not text.strip():
        raise DatasetError(f"{about}: the answer text is empty (a SQuAD v1.1 answer is a span of the context)")
    if not 0 <= start <= len(context) - len(text):
        raise DatasetError(f"{about}: the span lies outside the context ({len(context)} characters); expected "
                           f"0 <= answer_start <= {max(len(context) - len(text), 0)}")
    held = context[start:start + len(text)]
    if held != text:
        found = context.find(text)
        hint = (f"; the text is at answer_start {found}" if found >= 0
                else "; the context does not hold the text anywhere")
        shown_held = held if len(held) <= 60 else held[:57] + "..."
        raise DatasetError(f"{about}: the context holds {shown_held!r} there, not the answer text{hint}")


# -- windows ----------------------------------------------------------------------------------------------------------
def window_starts(doc_len: int, max_doc: int, doc_stride: int) -> list[int]:
    """Starts of the windows of ``max_doc`` tokens over ``doc_len`` context tokens, ``doc_stride`` apart, the last one
    reaching the end (run_squad.py's loop)."""
    starts, start = [], 0
    while start < doc_len:
        starts.append(start)
        length = min(doc_len - start, max_doc)
        if start + length == doc_len:
            break
        start += min(length, doc_stride)
    return starts


def make_windows(questions: list[Question], tokenizer: TextTokenizer, seq_len: int, *, doc_stride: int = DOC_STRIDE,
                 max_query_len: int = MAX_QUERY_LEN, model_name: str = "MODEL") -> Windows:
    """The rows ``[CLS] question [SEP] window [SEP]`` of every question (see the module docstring)."""
    contexts = list(dict.fromkeys(q.context for q in questions))  # each paragraph's context tokenized once
    context_tokens = {text: (np.array(e.ids, np.int64), np.array(e.offsets, np.int32).reshape(-1, 2))
                      for text, e in zip(contexts, tokenizer.encode(contexts))}
    layout = []  # (question index, query ids, context text, window start, window length) per row
    for index, (question, encoded) in enumerate(zip(questions, tokenizer.encode([q.question for q in questions]))):
        query = encoded.ids[:max_query_len]
        doc_len = len(context_tokens[question.context][0])
        max_doc = seq_len - len(query) - 3
        if max_doc < 1:
            raise DatasetError(f"{question.where}: the question takes {len(query)} tokens, leaving no room for the "
                               f"context in a sequence of {seq_len}")
        if not doc_len:
            raise DatasetError(f"{question.where}: the context has no tokens")
        layout += [(index, query, question.context, start, min(max_doc, doc_len - start))
                   for start in window_starts(doc_len, max_doc, doc_stride)]
    rows = len(layout)
    # three int64 inputs and the int32 character offsets per position, checked before they are allocated
    check_input_size(f"{len(questions)} questions", rows, seq_len * (3 * 8 + 2 * 4), "windows", model_name)
    input_ids = np.full((rows, seq_len), tokenizer.pad_id, np.int64)
    token_type_ids = np.zeros((rows, seq_len), np.int64)
    attention_mask = np.zeros((rows, seq_len), np.int64)
    offsets = np.full((rows, seq_len, 2), -1, np.int32)
    for row, (_, query, context, start, length) in enumerate(layout):
        doc_ids, doc_offsets = context_tokens[context]
        first = len(query) + 2  # the first context position, after [CLS] question [SEP]
        used = first + length + 1  # through the final [SEP]
        input_ids[row, :first] = [tokenizer.cls_id, *query, tokenizer.sep_id]
        input_ids[row, first:used - 1] = doc_ids[start:start + length]
        input_ids[row, used - 1] = tokenizer.sep_id
        token_type_ids[row, first:used] = 1
        attention_mask[row, :used] = 1
        offsets[row, first:used - 1] = doc_offsets[start:start + length]
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    return Windows(inputs, np.array([entry[0] for entry in layout], np.int64), offsets)


# -- answers ----------------------------------------------------------------------------------------------------------
def predict_answers(windows: Windows, questions: list[Question], start_logits, end_logits, *, n_best: int = N_BEST,
                    max_answer_len: int = MAX_ANSWER_LEN) -> list[str]:
    """The answer text of each question from the start/end logits (rows, seq_len) of its windows."""
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    best_score = [None] * len(questions)
    best_span = [None] * len(questions)
    for row in range(windows.rows):
        found = _best_in_window(start_logits[row], end_logits[row], windows.offsets[row], n_best, max_answer_len)
        if found is None:
            continue
        score, span = found
        index = int(windows.question[row])
        if best_score[index] is None or score > best_score[index]:  # strict: the first window wins a tie
            best_score[index], best_span[index] = score, span
    return [NO_ANSWER if span is None else q.context[span[0]:span[1]] for q, span in zip(questions, best_span)]


def _best_in_window(start, end, offsets, n_best: int, max_answer_len: int):
    """(score, (first char, end char)) of the best span of one row, or None when no candidate is valid."""
    starts = np.argsort(start)[-1:-n_best - 1:-1]  # the n_best highest, as postprocess_qa_predictions takes them
    ends = np.argsort(end)[-1:-n_best - 1:-1]
    length = ends[None, :] - starts[:, None] + 1  # (n_best, n_best)
    valid = (offsets[starts, 0] >= 0)[:, None] & (offsets[ends, 0] >= 0)[None, :] & (length >= 1)
    valid &= length <= max_answer_len
    if not valid.any():
        return None
    scores = np.where(valid, start[starts][:, None] + end[ends][None, :], -np.inf)  # in the logits' own precision
    i, j = np.unravel_index(np.argmax(scores), scores.shape)  # the first maximum in (start, end) candidate order
    return scores[i, j], (int(offsets[starts[i], 0]), int(offsets[ends[j], 1]))


# -- scoring: the official evaluate-v1.1.py ----------------------------------------------------------------------------
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truths) -> float:
    return max(float(normalize_answer(prediction) == normalize_answer(truth)) for truth in truths)


def f1_score(prediction: str, truths) -> float:
    return max(squad_f1(normalize_answer(prediction).split(), normalize_answer(truth).split()) for truth in truths)


# -- the evaluation set -----------------------------------------------------------------------------------------------
def load(path, model, checkpoint=None, limit: int | None = None) -> EvaluationSet:
    """The SQuAD v1.1 evaluation set of ``path`` for ``model`` (bert-base or albert), read with the checkpoint's
    tokenizer."""
    path = expect_file(path, "a SQuAD v1.1 JSON file (dev-v1.1.json layout)")
    if limit is not None and limit < 1:
        raise DatasetError(f"{path}: limit {limit}: expected at least 1 question")
    questions = read_questions(path)[:limit]
    tokenizer = load_tokenizer(checkpoint, f"SQuAD v1.1 {path.name!r}")
    seq_len = model.config.seq_len
    try:
        windows = make_windows(questions, tokenizer, seq_len, doc_stride=DOC_STRIDE, max_query_len=MAX_QUERY_LEN,
                               model_name=model.name)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    tokenizer.check_ids(windows.inputs["input_ids"], model.config.vocab_size, model.name)

    def scorer(outputs):
        logits = []
        for name in ("start_logits", "end_logits"):
            if name not in outputs:
                raise MetricError(f"SQuAD scoring needs the model output {name!r}; got {sorted(outputs)}")
            value = np.asarray(outputs[name])
            if value.shape != (windows.rows, seq_len):
                raise MetricError(f"{name}: shape {value.shape}, expected ({windows.rows}, {seq_len}) "
                                  "(one row per window)")
            logits.append(value)
        answers = predict_answers(windows, questions, *logits)
        em = [exact_match(answer, q.answers) for answer, q in zip(answers, questions)]
        f1 = [f1_score(answer, q.answers) for answer, q in zip(answers, questions)]
        return {"squad_exact_match": mean_metric(em), "squad_f1": mean_metric(f1)}

    provenance = {
        "format": FORMAT,
        "path": str(path),
        "sha256": sha256_files([path]),
        "units": len(questions),
        "rows": windows.rows,
        "labels": f"{len(questions)} questions with answers",
        "preprocessing": {"max_seq_len": seq_len, "doc_stride": DOC_STRIDE, "max_query_len": MAX_QUERY_LEN,
                          "n_best": N_BEST, "max_answer_len": MAX_ANSWER_LEN, "answer_tokens": "context",
                          **tokenizer.provenance()},
    }
    return EvaluationSet(model=model.name, inputs=windows.inputs, units=len(questions), provenance=provenance,
                         scorer=scorer)
