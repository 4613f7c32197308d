"""Sequence packing, as the seed benchmark ran BERT and ALBERT on the IPU (PopRT's pack runner, first-fit algorithm).

A device batch is ``packs`` rows of ``seq_len`` tokens; each incoming sequence goes into the first row of the open batch
with room for it, and when none has room the batch is sent and a new one opened. Attention is block-diagonal within a
row, so the device computes exactly what a padded batch of ``packs`` rows computes, while each row carries several
sequences: throughput in sequences is ``packs x sequences_per_pack / time per batch``.

The lengths are the seed benchmark's synthetic SQuAD lengths, N(172, 172) clipped to [1, seq_len] (``models.text``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from models.text import SQUAD_LENGTH_MEAN, SQUAD_LENGTH_STD

PACKING_SEED = 0
SIMULATED_SEQUENCES = 50_000


def squad_lengths(count: int, seq_len: int, seed: int = PACKING_SEED) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.normal(SQUAD_LENGTH_MEAN, SQUAD_LENGTH_STD, count)), 1, seq_len).astype(np.int64)


def first_fit(lengths, seq_len: int) -> list[list[int]]:
    """Rows of sequence indices: each sequence in the first row with room (rows hold at most ``seq_len`` tokens)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index, length in enumerate(lengths):
        length = int(length)
        if not 1 <= length <= seq_len:
            raise ValueError(f"packing: sequence {index} has length {length}, expected 1..{seq_len}")
        for row, free in enumerate(room):
            if free >= length:
                rows[row].append(index)
                room[row] -= length
                break
        else:
            rows.append([index])
            room.append(seq_len - length)
    return rows


@dataclass(frozen=True)
class PackingStats:
    seq_len: int
    packs: int  # rows per device batch
    mean_length: float  # tokens per sequence
    sequences_per_pack: float
    token_efficiency: float  # real tokens / (rows x seq_len)


@lru_cache(maxsize=None)
def packing_stats(packs: int, seq_len: int, sequences: int = SIMULATED_SEQUENCES) -> PackingStats:
    """Sequences per pack of the online first-fit pack runner with ``packs`` rows per batch, simulated on ``sequences``
    synthetic SQuAD lengths (deterministic)."""
    if packs < 1 or seq_len < 1:
        raise ValueError(f"packing: packs and seq_len must be >= 1, got {packs} and {seq_len}")
    lengths = squad_lengths(sequences, seq_len).tolist()
    room = [seq_len] * packs
    batches = batch_sequences = packed_sequences = 0
    for length in lengths:
        for row, free in enumerate(room):
            if free >= length:
                room[row] -= length
                break
        else:  # no room: the batch goes to the device, a new one opens with this sequence
            batches += 1
            packed_sequences += batch_sequences
            room = [seq_len] * packs
            room[0] -= length
            batch_sequences = 0
        batch_sequences += 1
    spp = packed_sequences / (batches * packs)
    mean = float(np.mean(lengths))
    return PackingStats(seq_len, packs, mean, spp, spp * mean / seq_len)
