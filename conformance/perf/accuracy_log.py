"""LoadGen's accuracy log: which responses a performance run samples into ``mlperf_log_accuracy.json``, and the file.

MLPerf's TEST01 runs in performance mode with ``accuracy_log_sampling_target`` set; LoadGen then writes a sample's
response to the accuracy log when ``frac(value + offset) <= probability``, where (LoadGen 6.0, ``loadgen.cc`` and
``issue_query_controller.h``):

- ``value`` is the sample's draw from a ``std::uniform_real_distribution<double>(0, 1)`` over a ``std::mt19937`` that
  is default-constructed (seed 5489: LoadGen never seeds it), one draw per generated sample in sequence-id order;
- ``offset`` is the first draw of the same distribution over a ``std::mt19937`` seeded with ``accuracy_log_rng_seed``;
- ``probability`` is ``sampling_target / expected``, ``expected`` being ``target_qps x min_duration`` (times the samples
  per query outside Offline), truncated to an integer, and at least the minimum sample count of the run.

A run on virtual time samples its responses by the same rule (:func:`sampled_sequence_ids`). A short run may sample
fewer responses than the target, even none; the suite's audit then raises the probability just enough to log
``minimum`` responses (the ones whose ``frac(value + offset)`` is smallest), so that an audit never sees nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from conformance.fileio import write_text_atomic
from conformance.perf.loadgen_rules import mt19937, uniform_doubles

LOADGEN_SAMPLE_VALUE_SEED = 5489  # std::mt19937's default seed: LoadGen's per-sample generator is never seeded
ACCURACY_LOG_FILE = "mlperf_log_accuracy.json"


def sampling_probability(sampling_target: int, *, scenario: str, target_qps: float, min_duration_ms: int,
                         min_query_count: int, samples_per_query: int) -> float:
    """LoadGen's accuracy-log probability for ``sampling_target`` responses. ``target_qps`` is LoadGen's internal
    one: 1e9 / expected latency (ns) in SingleStream and MultiStream, the target (Server) or expected (Offline) QPS;
    in Offline ``samples_per_query`` is the one query's size and ``min_query_count`` is not used."""
    expected = int(target_qps * int(min_duration_ms) / 1000)
    if scenario == "Offline":
        minimum = int(samples_per_query)
    else:
        expected *= int(samples_per_query)
        minimum = int(min_query_count) * int(samples_per_query)
    return sampling_target / max(expected, minimum, 1)


def sampled_sequence_ids(count: int, probability: float, rng_seed: int, minimum: int = 0) -> np.ndarray:
    """The sequence ids (0 .. ``count`` - 1, LoadGen's order of generation) whose responses LoadGen logs, raised to at
    least ``min(minimum, count)`` ids by logging the next-smallest values (see the module docstring)."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    offset = uniform_doubles(mt19937(rng_seed), 1)[0]
    values = uniform_doubles(mt19937(LOADGEN_SAMPLE_VALUE_SEED), count) + offset
    values = np.where(values < 1.0, values, values - 1.0)
    chosen = np.flatnonzero(values <= probability)
    wanted = min(int(minimum), count)
    if chosen.size < wanted:
        chosen = np.sort(np.argsort(values, kind="stable")[:wanted])
    return chosen.astype(np.int64)


@dataclass(frozen=True)
class LoggedResponse:
    seq_id: int
    qsl_idx: int
    data: bytes


def write_accuracy_log(path: Path, entries) -> None:
    """``mlperf_log_accuracy.json`` as LoadGen writes it: a JSON list of ``{"seq_id", "qsl_idx", "data": hex}``."""
    lines = [json.dumps({"seq_id": int(e.seq_id), "qsl_idx": int(e.qsl_idx), "data": e.data.hex().upper()})
             for e in entries]
    write_text_atomic(Path(path), "[\n" + ",\n".join(lines) + ("\n" if lines else "") + "]\n")
