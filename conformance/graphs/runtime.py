"""Running an exported graph on onnxruntime's CPU provider, and how far its outputs are from the numpy model's."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime

PROVIDERS = ["CPUExecutionProvider"]


def session(graph, threads: int | None = None, *, as_written: bool = False) -> onnxruntime.InferenceSession:
    """An onnxruntime CPU session of ``graph`` (a serialised ModelProto, a ModelProto or a path). ``as_written``: no
    graph optimisations, so every node runs as the graph states it (onnxruntime's default optimisations remove
    float16 Cast pairs, i.e. roundings a precision's graph states on purpose)."""
    options = onnxruntime.SessionOptions()
    if as_written:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = threads
    if hasattr(graph, "SerializeToString"):
        graph = graph.SerializeToString()
    return onnxruntime.InferenceSession(os.fspath(graph) if isinstance(graph, os.PathLike) else graph, options,
                                        providers=PROVIDERS)


def run(sess: onnxruntime.InferenceSession, inputs: dict[str, np.ndarray], batch_size: int = 8) -> dict[str, np.ndarray]:
    """The session's outputs on ``inputs`` (fed in batches of ``batch_size``), by output name."""
    names = [output.name for output in sess.get_outputs()]
    count = len(next(iter(inputs.values())))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for start in range(0, count, batch_size):
        feed = {key: value[start:start + batch_size] for key, value in inputs.items()}
        for name, value in zip(names, sess.run(names, feed)):
            parts[name].append(value)
    return {name: np.concatenate(values) for name, values in parts.items()}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """``||actual - expected||_2 / ||expected||_2`` over all elements, in float64 (0 when both are 0)."""
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {e.shape}")
    scale = np.linalg.norm(e)
    diff = np.linalg.norm(a - e)
    return float(diff / scale) if scale else float(diff)


def max_relative_error(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """The largest :func:`relative_error` over the outputs of ``expected`` (each output judged on its own scale)."""
    return max(relative_error(actual[name], value) for name, value in expected.items())
