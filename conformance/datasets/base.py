"""What every evaluation-data format gives the accuracy tests: the model's inputs, the labels as a scorer, and where it
all came from.

A format module exposes ``load(path, model, checkpoint=None, limit=None) -> EvaluationSet``:

- ``path``: the user's file or folder (``--dataset MODEL=PATH``);
- ``model``: the loaded :class:`models.base.Model` (its config gives sequence length, image size, vocabulary, classes);
- ``checkpoint``: the checkpoint directory (``--checkpoint MODEL=PATH``) or None; tokenizers and image preprocessing
  configs are looked up there;
- ``limit``: at most this many evaluation units (questions, images, pairs of a triplet, rows), the first ones in file
  order; None for all of them.

Anything malformed is a :class:`DatasetError` naming the file (and line or entry) and what was expected, raised before
any model runs. Every reader is bounded (``boundedio``, ``conformance.fileio``): a special file (FIFO, device) is
refused before it is opened, each kind of file has a size limit, nothing is read or decompressed beyond the ``limit``
units asked for, and the model inputs of a set held whole are checked against :func:`input_budget` before they are
allocated. A format that can stream takes ``stream=True``: its inputs are then a :class:`BatchSource` that reads and
preprocesses the rows of one batch when the run reaches them (the listing and labels read up front), so that a set
larger than memory runs and is not refused for its total size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from boundedio import GIB, MIB, open_regular
from conformance.distributed.source import BatchSource, Inputs, row_count, take
from conformance.accuracy.metrics import TaskMetric
from models.base import MEMORY_SHARE, available_memory

# Bounds of what the data readers take, so that no file, however crafted, makes them block or exhaust memory: a whole
# JSON document is read at most this large (SQuAD v1.1's dev set is 4.9 MB, its training set 30 MB) ...
MAX_JSON_BYTES = 256 * MIB
# ... a list of names and labels (ImageNet's val_map.txt is 1.6 MB for 50,000 images) ...
MAX_LIST_BYTES = 64 * MIB
# ... and the model inputs an evaluation set holds in memory at most this large (also at most MEMORY_SHARE of the
# memory available); a larger set is refused before it is allocated, with the --samples that judges a part of it.
MAX_INPUT_BYTES = 16 * GIB


class DatasetError(ValueError):
    """Evaluation data that cannot be used: names the file (and line or entry) and what was expected."""


def input_budget() -> int:
    """Bytes the model inputs of one evaluation set may take: :data:`MAX_INPUT_BYTES`, or less when less memory is
    available."""
    return int(min(MAX_INPUT_BYTES, MEMORY_SHARE * available_memory()))


def check_input_size(where, rows: int, row_bytes: int, unit: str, model_name: str) -> None:
    """A DatasetError naming ``where`` when ``rows`` rows of ``row_bytes`` each exceed :func:`input_budget`, raised
    before they are allocated."""
    need, budget = rows * row_bytes, input_budget()
    if need > budget:
        raise DatasetError(f"{where}: {rows:,} {unit} need {need / GIB:.3g} GiB of model inputs ({row_bytes:,} bytes "
                           f"each), more than the {budget / GIB:.3g} GiB an evaluation set may take here; judge a part "
                           f"of it with --samples {model_name}=N")


@dataclass(frozen=True)
class EvaluationSet:
    """A user's evaluation data, ready for the model.

    ``inputs``: the model's input arrays (one row per model sample; a SQuAD question may take several windows, a
    CAIL triplet two rows (A,B),(A,C) interleaved), or a :class:`BatchSource` that reads them per batch (a streamed
    set: nothing reads it whole but :meth:`whole`).
    ``scorer``: outputs of the model on ``inputs`` -> the task metrics against the labels, each a
    :class:`TaskMetric` over evaluation units (questions, images, triplets, rows), so that the confidence intervals
    resample units; None when the data has no labels (conformer).
    ``units``: the number of evaluation units.
    ``provenance``: what was judged, for the report: ``format``, ``path``, ``sha256`` (of the file, or of the files
    read from a folder, in order), ``units``, ``rows`` (model samples), ``labels`` (a short description of label
    coverage, e.g. "412 of 1000 classes" or "clicks 25.6%"), ``preprocessing`` (a dict of the settings used; it is part
    of the cache key of the FP32 outputs).
    """

    model: str
    inputs: Inputs
    units: int
    provenance: dict[str, Any]
    scorer: Callable[[dict[str, np.ndarray]], dict[str, TaskMetric]] | None = field(default=None, compare=False)

    @property
    def labelled(self) -> bool:
        return self.scorer is not None

    @property
    def streamed(self) -> bool:
        return isinstance(self.inputs, BatchSource)

    @property
    def rows(self) -> int:
        return row_count(self.inputs)

    def whole(self) -> dict[str, np.ndarray]:
        """The inputs as arrays held whole: a streamed set is read whole once its size is checked against
        :func:`input_budget` (a DatasetError naming its path otherwise)."""
        if not isinstance(self.inputs, BatchSource):
            return self.inputs
        check_input_size(self.provenance.get("path", self.model), self.inputs.rows, self.inputs.row_bytes,
                         "rows", self.model)
        return take(self.inputs, 0, self.inputs.rows)

    def label_metrics(self, outputs: dict[str, np.ndarray]) -> dict[str, TaskMetric]:
        """The task metrics of ``outputs`` against the labels ({} without labels)."""
        return {} if self.scorer is None else self.scorer(outputs)


@dataclass(frozen=True)
class SampleLabels:
    """The labels of the suite's own evaluation samples, where a seeded model was built to solve their task (the
    synthetic images' classes: :meth:`models.base.Model.sample_labels`), scored as a data set's labels are.
    ``scorer``: the model's data format's ``label_scorer(labels)``."""

    model: str
    labels: np.ndarray = field(compare=False)
    scorer: Callable[[dict[str, np.ndarray]], dict[str, TaskMetric]] = field(compare=False)
    labelled: ClassVar[bool] = True

    def label_metrics(self, outputs: dict[str, np.ndarray]) -> dict[str, TaskMetric]:
        return self.scorer(outputs)


def expect_file(path, expected: str) -> Path:
    """``path`` as a Path, or a DatasetError when it is a folder where the format is one file (``expected`` says
    which)."""
    path = Path(path)
    if path.is_dir():
        raise DatasetError(f"{path}: a folder; expected {expected}")
    return path


def sha256_files(paths) -> str:
    """SHA-256 over the bytes of ``paths`` in the given order (each prefixed by its name, so renames count)."""
    h = hashlib.sha256()
    for path in paths:
        path = Path(path)
        h.update(f"{path.name}|".encode())
        with open_regular(path, "a data file", error=DatasetError) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
