"""Criteo display-advertising TSV for widedeep: the Kaggle ``train.txt`` layout (also Criteo 1TB's ``day_N``), one
row per line, 40 tab-separated fields: the click label (0/1), I1..I13 integer counts (empty when missing, some
negative), C1..C26 categorical values as hex strings (8 hex digits in Criteo's files; empty when missing). A ``.gz``
file is read through gzip. Kaggle's ``test.txt`` has no label column and cannot be scored.

Mapping into the model's inputs (``models/widedeep.py`` documents ``log(1 + x)`` with missing -> 0 for the numeric
features and hashed ids in ``[0, bucket_sizes[i])``, but not the hash of the raw values), as DLRM's Criteo
preprocessing (``data_utils.py``) does:

- numeric: missing -> 0; negative counts clamped to 0 (DLRM's ``X_int[X_int < 0] = 0``); then ``log(1 + x)``
  (computed in float64, stored as float32);
- categorical: ``int(hex, 16) % bucket_sizes[i]`` (DLRM's ``max_ind_range`` hashing, with one range per feature);
  missing -> id 0 (DLRM reads an empty field as ``"0"``), which a value that hashes to 0 shares.

Reading is bounded: the file (a regular file; a FIFO or device is refused before it is opened) is read one line at a
time, a line at most :data:`MAX_LINE_BYTES` long, and only as far as the rows asked for (a ``.gz`` file is never
decompressed beyond them); an integer count has at most 18 digits and a categorical value at most 16 hex digits; the
rows read whole without ``--samples`` may take at most :func:`conformance.datasets.base.input_budget` bytes. Streamed
(an uncompressed file), only the labels and the offsets of every :data:`INDEX_STRIDE`-th row are held; each batch's
features are parsed from the file when the run reaches it.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from boundedio import GIB, KIB, iter_lines, open_regular
from conformance.accuracy.metrics import auc_metric, click_probability, mean_metric
from conformance.datasets.base import DatasetError, EvaluationSet, expect_file, input_budget, sha256_files
from conformance.distributed.source import BatchSource

NUM_INTEGER = 13
NUM_CATEGORICAL = 26
FIELDS = 1 + NUM_INTEGER + NUM_CATEGORICAL
MISSING_CATEGORY_ID = 0
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_DIGITS = b"0123456789"
_CHUNK = 1 << 16  # rows parsed into one block of arrays
MAX_LINE_BYTES = 64 * KIB  # a Criteo line is a few hundred bytes
MAX_FILE_BYTES = 1024 * GIB  # Criteo 1TB's 24 days together, uncompressed, are about this size
MAX_COUNT_DIGITS = 18  # an integer count fits an int64 and a float exactly
MAX_HEX_DIGITS = 16  # a categorical value is a 64-bit hash at most (Criteo's are 8 hex digits)
ROW_BYTES = 1 + 4 * NUM_INTEGER + 8 * NUM_CATEGORICAL  # label, numeric features, ids of one row in memory
INDEX_STRIDE = 1024  # a streamed file keeps the byte offset of every this many rows (a batch reads from the nearest)


def _open(path: Path):
    handle = open_regular(path, "a Criteo TSV file", MAX_FILE_BYTES, DatasetError)
    return gzip.GzipFile(fileobj=handle, mode="rb") if path.suffix == ".gz" else handle


def _show(field: bytes) -> str:
    text = field.decode("ascii", errors="backslashreplace")
    return repr(text) if len(text) <= 40 else repr(text[:30]) + f"... ({len(field)} bytes)"


def _parse_line(path: Path, number: int, line: bytes, buckets: list[int], labels, counts, ids, row: int) -> None:
    """Row ``row`` of the blocks from line ``number`` (a DatasetError naming ``path:number`` and the field)."""
    fields = line.split(b"\t")
    if len(fields) != FIELDS:
        hint = " (no label column, as Kaggle's test.txt: only labelled data can be scored)" \
            if len(fields) == FIELDS - 1 else ""
        raise DatasetError(f"{path}:{number}: {len(fields)} tab-separated field(s), expected {FIELDS} "
                           f"(label, I1..I13, C1..C26){hint}")
    label = fields[0]
    if label not in (b"0", b"1"):
        raise DatasetError(f"{path}:{number}: label {_show(label)} is not 0 or 1")
    labels[row] = label == b"1"
    for i in range(NUM_INTEGER):
        value = fields[1 + i]
        if not value:
            counts[row, i] = 0.0
            continue
        digits = value[1:] if value[:1] == b"-" else value
        if not digits or digits.translate(None, _DIGITS) or len(digits) > MAX_COUNT_DIGITS:
            raise DatasetError(f"{path}:{number}: I{i + 1} {_show(value)} is not an integer count "
                               f"(expected up to {MAX_COUNT_DIGITS} digits, optionally negative, or empty)")
        counts[row, i] = max(int(value), 0)
    for i in range(NUM_CATEGORICAL):
        value = fields[1 + NUM_INTEGER + i]
        if not value:
            ids[row, i] = MISSING_CATEGORY_ID
            continue
        if value.translate(None, _HEX_DIGITS) or len(value) > MAX_HEX_DIGITS:
            raise DatasetError(f"{path}:{number}: C{i + 1} {_show(value)} is not hex "
                               f"(expected up to {MAX_HEX_DIGITS} hex digits, e.g. '68fd1e64', or empty)")
        ids[row, i] = int(value, 16) % buckets[i]


def _rows(path: Path, bucket_sizes, limit: int | None, max_rows: int, offset: int = 0, first_line: int = 1,
          index: list[int] | None = None):
    """(labels int8, counts float64, ids int64) blocks of the rows of ``path`` from byte ``offset`` (line
    ``first_line``) on, at most ``limit`` of them (a DatasetError beyond ``max_rows``); with ``index``, the byte
    offset of every :data:`INDEX_STRIDE`-th row is appended to it."""
    buckets = [int(b) for b in bucket_sizes]
    chunk = _CHUNK if limit is None else max(1, min(_CHUNK, limit))
    labels, counts, ids = np.empty(chunk, np.int8), np.empty((chunk, NUM_INTEGER), np.float64), \
        np.empty((chunk, NUM_CATEGORICAL), np.int64)
    filled = rows = 0
    handle = _open(path)
    try:
        with handle:
            handle.seek(offset)
            position = offset
            for number, line in iter_lines(handle, path, MAX_LINE_BYTES, DatasetError):
                if limit is not None and rows >= limit:
                    break
                if rows >= max_rows:
                    raise DatasetError(f"{path}: more than {max_rows:,} rows, more than an evaluation set may take "
                                       "here in memory; judge a part of it with --samples widedeep=N")
                if index is not None and rows % INDEX_STRIDE == 0:
                    index.append(position)
                _parse_line(path, number + first_line - 1, line, buckets, labels, counts, ids, filled)
                if index is not None:
                    position = handle.tell()
                filled += 1
                rows += 1
                if filled == chunk:
                    yield labels[:filled], counts[:filled], ids[:filled]
                    filled = 0
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc})") from None
    if rows == 0:
        raise DatasetError(f"{path}: no rows; expected tab-separated lines of label, I1..I13, C1..C26")
    if filled:
        yield labels[:filled], counts[:filled], ids[:filled]


def _features(counts: np.ndarray) -> np.ndarray:
    return np.log1p(counts).astype(np.float32)


def parse_rows(path: Path, bucket_sizes, limit: int | None = None):
    """(labels int8 (N,), numeric_features float32 (N, 13), categorical_ids int64 (N, 26)) of the first ``limit``
    rows of a Criteo TSV; a malformed line is a DatasetError naming ``path:line`` and the field."""
    max_rows = input_budget() // (2 * ROW_BYTES)  # the blocks, then their concatenation
    blocks = [(labels.copy(), _features(counts), ids.copy())
              for labels, counts, ids in _rows(path, bucket_sizes, limit, max_rows)]
    return tuple(np.concatenate([b[i] for b in blocks]) for i in range(3))


class CriteoSource(BatchSource):
    """The ``numeric_features`` and ``categorical_ids`` of the rows of an uncompressed Criteo TSV, parsed per batch
    from the byte offsets of every :data:`INDEX_STRIDE`-th row (found by the pass that checked every line and read
    the labels); a row's features are the same bits whichever batch reads them."""

    def __init__(self, path: Path, bucket_sizes, rows: int, index: list[int]):
        self.path, self.bucket_sizes, self.count, self.index = path, tuple(bucket_sizes), rows, index

    @property
    def rows(self) -> int:
        return self.count

    @property
    def row_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {"categorical_ids": ((NUM_CATEGORICAL,), np.dtype(np.int64)),
                "numeric_features": ((NUM_INTEGER,), np.dtype(np.float32))}

    def take(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if start == stop:
            return {name: np.empty((0, *shape), dtype) for name, (shape, dtype) in self.row_spec.items()}
        first = start - start % INDEX_STRIDE
        numeric, ids, skip = [], [], start - first
        for _, counts, block_ids in _rows(self.path, self.bucket_sizes, stop - first, self.count,
                                          offset=self.index[first // INDEX_STRIDE], first_line=first + 1):
            cut = min(skip, len(counts))
            skip -= cut
            numeric.append(_features(counts[cut:]))
            ids.append(block_ids[cut:].copy())
        return {"categorical_ids": np.concatenate(ids), "numeric_features": np.concatenate(numeric)}


def load(path, model, checkpoint=None, limit: int | None = None, stream: bool = False) -> EvaluationSet:
    """The rows of a Criteo TSV as widedeep's ``numeric_features`` and ``categorical_ids``, with click accuracy and
    ROC AUC against the labels. ``checkpoint`` is not used (the model's config carries the bucket sizes). With
    ``stream`` and an uncompressed file, every line is checked and the labels read up front, the features parsed per
    batch (:class:`CriteoSource`); a ``.gz`` file, which cannot be read from the middle, is read whole."""
    path = expect_file(path, "a Criteo TSV file (e.g. train.txt)")
    config = model.config
    if config.num_numeric != NUM_INTEGER or config.num_categorical != NUM_CATEGORICAL:
        raise DatasetError(f"{path}: Criteo rows have {NUM_INTEGER} integer and {NUM_CATEGORICAL} categorical "
                           f"features; the model takes {config.num_numeric} and {config.num_categorical}")
    if stream and path.suffix != ".gz":
        index: list[int] = []
        labels = np.concatenate([block[0].copy() for block in _rows(path, config.bucket_sizes, limit,
                                                                    input_budget(), index=index)])
        inputs = CriteoSource(path, config.bucket_sizes, len(labels), index)
    else:
        labels, numeric, ids = parse_rows(path, config.bucket_sizes, limit)
        inputs = {"categorical_ids": ids, "numeric_features": numeric}
    rows = len(labels)

    def scorer(outputs: dict[str, np.ndarray]):
        p = click_probability(outputs["probabilities"])
        return {"click_accuracy": mean_metric((p >= 0.5) == (labels != 0)),
                "click_auc": auc_metric(p, labels)}

    clicks = int(labels.sum())
    provenance = {
        "format": "criteo-tsv",
        "path": str(path),
        "sha256": sha256_files([path]),
        "units": rows,
        "rows": rows,
        "labels": f"clicks {100.0 * clicks / rows:.1f}% of {rows} rows",
        "preprocessing": {
            "numeric": "log(1 + max(x, 0)), missing -> 0 (DLRM's Criteo preprocessing)",
            "categorical": f"int(hex, 16) % bucket_sizes[i], missing -> {MISSING_CATEGORY_ID}",
            "bucket_sizes": list(config.bucket_sizes),
        },
    }
    return EvaluationSet(model=model.name, inputs=inputs, units=rows, provenance=provenance, scorer=scorer)


__all__ = ["CriteoSource", "load", "parse_rows"]
