"""CAIL2019-SCM (similar case matching) JSON lines for roformer, read with the checkpoint's tokenizer.

Each line is a triplet ``{"A": text, "B": text, "C": text, "label": "B" | "C"}``: the label says which of B and C is
more similar to A. A triplet gives two rows, (A, B) then (A, C) (the seed benchmark's interleaved layout), each
``[CLS] A [SEP] B [SEP]`` with token_type_ids 0 then 1, truncated longest-first to the model's ``seq_len`` as the
``tokenizers`` library truncates a pair (a text keeps its length while it fits in half of the room, else the two
share it, the second text taking the odd token), padded with the tokenizer's pad token. The prediction is "B" when the
similarity score of (A, B) is above that of (A, C), else "C"; ``pair_accuracy`` is the share of triplets predicted
right. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from boundedio import GIB, MIB, decode_text, iter_lines, open_regular, parse_json
from conformance.accuracy.metrics import MetricError, mean_metric, similarity_score
from conformance.datasets.base import DatasetError, EvaluationSet, check_input_size, expect_file, sha256_files
from conformance.datasets.tokenizer import TextTokenizer, load_tokenizer

FORMAT = "cail2019-scm"
TEXT_KEYS = ("A", "B", "C")
LABELS = ("B", "C")
MAX_LINE_BYTES = 16 * MIB  # one triplet of court documents (CAIL2019-SCM's are a few KB each)
MAX_READ_BYTES = 1 * GIB  # lines read in all; a larger file is judged in part with --samples


@dataclass(frozen=True)
class Triplet:
    a: str
    b: str
    c: str
    label: str  # "B" or "C"
    line: int


def read_triplets(path, limit: int | None = None) -> list[Triplet]:
    """The first ``limit`` (all when None) triplets of a CAIL2019-SCM JSON-lines file, in file order; a DatasetError
    with file:line otherwise. The file (a regular file) is read one line at a time, each at most
    :data:`MAX_LINE_BYTES`, no further than the triplets asked for and at most :data:`MAX_READ_BYTES` in all."""
    path = Path(path)
    triplets = []
    read = 0
    with open_regular(path, "a CAIL2019-SCM JSON-lines file", error=DatasetError) as handle:
        for number, raw in iter_lines(handle, path, MAX_LINE_BYTES, DatasetError):
            if limit is not None and len(triplets) >= limit:
                break
            read += len(raw) + 1
            if read > MAX_READ_BYTES:
                raise DatasetError(f"{path}: more than {MAX_READ_BYTES // GIB} GiB of triplets before line {number}; "
                                   "judge a part of it with --samples roformer=N")
            line = decode_text(raw, path, DatasetError, first_line=number)
            if line.strip():
                triplets.append(_read_line(path, number, line))
    if not triplets:
        raise DatasetError(f"{path}: no triplets (expected one JSON object per line with keys A, B, C and label)")
    return triplets


def _read_line(path: Path, number: int, line: str) -> Triplet:
    where = f"{path}:{number}"
    entry = parse_json(line, path, DatasetError, first_line=number)
    if not isinstance(entry, dict):
        raise DatasetError(f"{where}: expected a JSON object with keys A, B, C and label, got {type(entry).__name__}")
    for key in (*TEXT_KEYS, "label"):
        if key not in entry:
            raise DatasetError(f"{where}: missing {json.dumps(key)} (expected keys A, B, C and label)")
        if not isinstance(entry[key], str):
            raise DatasetError(f"{where}: {key} is {json.dumps(entry[key])[:40]}, expected a string")
    if entry["label"] not in LABELS:
        raise DatasetError(f"{where}: label {json.dumps(entry['label'])} is not \"B\" or \"C\"")
    return Triplet(entry["A"], entry["B"], entry["C"], entry["label"], number)


def truncated_lengths(first: int, second: int, room: int) -> tuple[int, int]:
    """Lengths of two texts of ``first`` and ``second`` tokens cut to fit ``room`` tokens together, as ``tokenizers``'
    longest-first truncation of a pair cuts them."""
    if first + second <= room:
        return first, second
    swap = first > second
    short, long = (second, first) if swap else (first, second)
    long = long if short > room else max(short, room - short)
    if short + long > room:
        short, long = room // 2, room // 2 + room % 2
    return (long, short) if swap else (short, long)


def make_rows(triplets: list[Triplet], tokenizer: TextTokenizer, seq_len: int) -> dict[str, np.ndarray]:
    """The rows (A, B), (A, C) of every triplet, interleaved: input_ids, token_type_ids, attention_mask, each
    (2 x triplets, seq_len)."""
    texts = [text for t in triplets for text in (t.a, t.b, t.c)]
    encoded = [e.ids for e in tokenizer.encode(texts)]
    room = seq_len - 3
    if room < 2:
        raise DatasetError(f"a sequence of {seq_len} tokens leaves no room for two texts")
    check_input_size(f"{len(triplets)} triplets", 2 * len(triplets), 3 * 8 * seq_len, "rows", "roformer")
    ids = np.full((2 * len(triplets), seq_len), tokenizer.pad_id, np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for t in range(len(triplets)):
        a, b, c = encoded[3 * t:3 * t + 3]
        for row, other in ((2 * t, b), (2 * t + 1, c)):
            n_a, n_other = truncated_lengths(len(a), len(other), room)
            tokens = [tokenizer.cls_id, *a[:n_a], tokenizer.sep_id, *other[:n_other], tokenizer.sep_id]
            ids[row, :len(tokens)] = tokens
            types[row, n_a + 2:len(tokens)] = 1
            mask[row, :len(tokens)] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def label_share(triplets: list[Triplet]) -> str:
    """E.g. "B 52%, C 48%"."""
    counts = Counter(t.label for t in triplets)
    return ", ".join(f"{label} {100 * counts[label] / len(triplets):.0f}%" for label in LABELS)


def load(path, model, checkpoint=None, limit: int | None = None) -> EvaluationSet:
    """The CAIL2019-SCM evaluation set of ``path`` for roformer, with the checkpoint's tokenizer."""
    path = expect_file(path, "a CAIL2019-SCM JSON-lines file")
    if limit is not None and limit < 1:
        raise DatasetError(f"{path}: limit {limit}: expected at least 1 triplet")
    triplets = read_triplets(path, limit)
    tokenizer = load_tokenizer(checkpoint, f"CAIL2019-SCM {path.name!r}")
    seq_len = model.config.seq_len
    try:
        inputs = make_rows(triplets, tokenizer, seq_len)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    tokenizer.check_ids(inputs["input_ids"], model.config.vocab_size, model.name)
    truth_is_b = np.array([t.label == "B" for t in triplets])

    def scorer(outputs):
        if "logits" not in outputs:
            raise MetricError(f"CAIL2019-SCM scoring needs the model output 'logits'; got {sorted(outputs)}")
        logits = np.asarray(outputs["logits"])
        if len(logits) != 2 * len(triplets):
            raise MetricError(f"logits: {len(logits)} rows, expected {2 * len(triplets)} (two per triplet)")
        score = similarity_score(logits)
        predicts_b = score[0::2] > score[1::2]
        return {"pair_accuracy": mean_metric(predicts_b == truth_is_b)}

    provenance = {
        "format": FORMAT,
        "path": str(path),
        "sha256": sha256_files([path]),
        "units": len(triplets),
        "rows": 2 * len(triplets),
        "labels": label_share(triplets),
        "preprocessing": {"max_seq_len": seq_len, "layout": "[CLS] A [SEP] B|C [SEP], rows (A,B),(A,C)",
                          "truncation": "longest_first", **tokenizer.provenance()},
    }
    return EvaluationSet(model=model.name, inputs=inputs, units=len(triplets), provenance=provenance, scorer=scorer)
