"""The inputs of a run: a dict of arrays held whole, or a :class:`BatchSource` that reads and preprocesses the rows
of one batch when the engine asks for them, so that an evaluation set larger than memory runs with about one batch
(per task in flight) held at a time. The functions below take either, so the engine and the accuracy code never read
a source whole."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Union

import numpy as np


class BatchSource(ABC):
    """Model inputs given on demand: the number of rows is known up front, the arrays of rows [start, stop) are
    read and preprocessed when asked for, the same bits each time (a row does not depend on the batch it is read in)."""

    @property
    @abstractmethod
    def rows(self) -> int:
        """The number of rows (model samples)."""

    @property
    @abstractmethod
    def row_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Each input's name -> (shape of one row, dtype)."""

    @abstractmethod
    def take(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The inputs of rows ``start:stop`` (``0 <= start <= stop <= rows``), freshly read."""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row's inputs."""
        return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                   for shape, dtype in self.row_spec.values())


Inputs = Union[dict, BatchSource]


def row_count(inputs: Inputs) -> int:
    """The number of rows of ``inputs``."""
    if isinstance(inputs, BatchSource):
        return inputs.rows
    return len(next(iter(inputs.values())))


def row_elements(inputs: Inputs) -> int:
    """The input values of one row, summed over the inputs."""
    if isinstance(inputs, BatchSource):
        return sum(int(np.prod(shape, dtype=np.int64)) for shape, _ in inputs.row_spec.values())
    return sum(int(np.prod(np.shape(v)[1:], dtype=np.int64)) for v in inputs.values())


def take(inputs: Inputs, start: int, stop: int) -> dict[str, np.ndarray]:
    """Rows ``start:stop`` of ``inputs`` (views of a dict's arrays; read from a source)."""
    if isinstance(inputs, BatchSource):
        count = inputs.rows
        if not 0 <= start <= stop <= count:
            raise IndexError(f"rows {start}:{stop} of a source of {count} rows")
        return inputs.take(start, stop)
    return {k: v[start:stop] for k, v in inputs.items()}


def pick(inputs: Inputs, rows: Sequence[int]) -> dict[str, np.ndarray]:
    """The rows ``rows`` of ``inputs`` in that order (a source reads each of them)."""
    if not isinstance(inputs, BatchSource):
        return {k: v[list(rows)] for k, v in inputs.items()}
    parts = [take(inputs, int(r), int(r) + 1) for r in rows]
    if not parts:
        return {name: np.empty((0, *shape), dtype) for name, (shape, dtype) in inputs.row_spec.items()}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
