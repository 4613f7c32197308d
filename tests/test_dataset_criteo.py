"""The widedeep Criteo TSV reader: inputs equal an independent parse (csv module, math.log1p, DLRM's hashing written
out), click accuracy and AUC equal independent computations (a pairwise count for AUC), bad lines give file:line."""

from __future__ import annotations

import csv
import gzip
import math

import numpy as np
import pytest

from conformance.datasets import DatasetError, load_dataset, sha256_files
from models import load_model

BUCKETS = (97, 13, 1000, 7, 5, 64, 101, 3, 2, 50, 977, 31, 11, 40, 1, 9, 23, 8191, 6, 17, 4, 29, 37, 19, 43, 128)
HEX_VALUES = ["68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf", "de7995b8", "1f89b562",
              "a73ee510", "a8cd5504", "b2cb9c98", "37c9c164", "2824a5f6", "1adce6ef", "8ba8b39a", "891b62e7",
              "e5ba7672", "f54016b9", "21ddcdc9", "b1252a9d", "07b5194c", "3a171ecb", "c5c50484", "e8b83407",
              "9727dd16", "05db9164", "ffffffff", "00000000", "DEADBEEF"]
LABELS = [0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1]


def criteo_lines(rows: int = len(LABELS), seed: int = 0) -> list[str]:
    """Criteo-like lines: some empty integers and categories, negative integers, a large count, upper-case hex."""
    rng = np.random.default_rng(seed)
    lines = []
    for r in range(rows):
        ints = []
        for i in range(13):
            u = rng.random()
            value = -int(rng.integers(1, 4)) if u < 0.3 else int(rng.integers(0, 5000))
            ints.append("" if u < 0.2 else str(value))
        if r == 3:
            ints[4] = "2147483647000"  # beyond int32
        cats = ["" if rng.random() < 0.15 else HEX_VALUES[int(rng.integers(0, len(HEX_VALUES)))] for _ in range(26)]
        lines.append("\t".join([str(LABELS[r % len(LABELS)])] + ints + cats))
    return lines


def independent_parse(path, buckets):
    """The documented mapping, written with the csv module: log1p(max(x, 0)), missing 0; int(hex, 16) % buckets,
    missing 0."""
    labels, numeric, ids = [], [], []
    with open(path, newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            labels.append(int(row[0]))
            numeric.append([math.log1p(max(int(v), 0)) if v else 0.0 for v in row[1:14]])
            ids.append([int(v, 16) % b if v else 0 for v, b in zip(row[14:], buckets)])
    return np.array(labels), np.array(numeric, np.float32), np.array(ids, np.int64)


def pairwise_auc(p, y) -> float:
    """P(score of a positive > score of a negative), ties one half, by counting every pair."""
    pos = [s for s, t in zip(p, y) if t == 1]
    neg = [s for s, t in zip(p, y) if t == 0]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


@pytest.fixture(scope="module")
def model():
    return load_model("widedeep", bucket_sizes=BUCKETS, embedding_dim=4, hidden_sizes=(16, 8))


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\n".join(criteo_lines()) + "\n")
    return path


def test_inputs_match_independent_parse(tsv, model):
    data = load_dataset("widedeep", tsv, model)
    labels, numeric, ids = independent_parse(tsv, BUCKETS)
    assert set(data.inputs) == {"categorical_ids", "numeric_features"}
    assert data.inputs["categorical_ids"].dtype == np.int64 and data.inputs["numeric_features"].dtype == np.float32
    np.testing.assert_array_equal(data.inputs["categorical_ids"], ids)
    np.testing.assert_allclose(data.inputs["numeric_features"], numeric, rtol=1e-7, atol=0)
    assert (numeric == 0).any() and (ids == 0).any()  # the fixture does have missing values
    assert data.units == len(LABELS)
    model.validate_inputs(data.inputs)  # ids inside every feature's buckets

    prov = data.provenance
    assert prov["format"] == "criteo-tsv" and prov["units"] == prov["rows"] == len(LABELS)
    assert prov["labels"] == f"clicks {100 * sum(LABELS) / len(LABELS):.1f}% of {len(LABELS)} rows"
    assert prov["sha256"] == sha256_files([tsv])
    assert prov["preprocessing"]["bucket_sizes"] == list(BUCKETS)


def test_metrics_match_independent_computation(tsv, model):
    data = load_dataset("widedeep", tsv, model)
    outputs = model(data.inputs)
    p = outputs["probabilities"][:, 1].astype(np.float64)
    metrics = data.label_metrics(outputs)
    assert set(metrics) == {"click_accuracy", "click_auc"}
    expected_accuracy = sum((pi >= 0.5) == (yi == 1) for pi, yi in zip(p, LABELS)) / len(LABELS)
    assert metrics["click_accuracy"].value == pytest.approx(expected_accuracy)
    assert metrics["click_auc"].value == pytest.approx(pairwise_auc(p, LABELS))

    # crafted probabilities: some above and at 0.5, ties across the classes
    crafted = np.array([0.1, 0.9, 0.5, 0.3, 0.3, 0.7, 0.2, 0.5, 0.3, 0.05, 0.6, 0.49])
    metrics = data.label_metrics({"probabilities": np.stack([1 - crafted, crafted], axis=1)})
    assert metrics["click_accuracy"].value == pytest.approx(
        np.mean([(c >= 0.5) == (y == 1) for c, y in zip(crafted, LABELS)]))
    assert metrics["click_accuracy"].value == pytest.approx(5 / 12)  # p = 0.5 counts as a click
    assert metrics["click_auc"].value == pytest.approx(pairwise_auc(crafted, LABELS))
    # a resample of the rows (repeats included), as the confidence intervals draw them
    idx = np.array([0, 1, 1, 2, 3, 4, 4, 4, 8, 11, 11])
    assert metrics["click_auc"].statistic(idx) == pytest.approx(
        pairwise_auc(crafted[idx], [LABELS[i] for i in idx]))
    assert metrics["click_accuracy"].units == metrics["click_auc"].units == len(LABELS)


def test_limit_and_gzip(tsv, model, tmp_path):
    first = load_dataset("widedeep", tsv, model, limit=5)
    assert first.units == 5
    full = load_dataset("widedeep", tsv, model)
    np.testing.assert_array_equal(first.inputs["categorical_ids"], full.inputs["categorical_ids"][:5])
    packed = tmp_path / "day_0.gz"
    packed.write_bytes(gzip.compress(tsv.read_bytes()))
    unpacked = load_dataset("widedeep", packed, model)
    np.testing.assert_array_equal(unpacked.inputs["numeric_features"], full.inputs["numeric_features"])


def _replace(line: str, index: int, value: str) -> str:
    fields = line.split("\t")
    fields[index] = value
    return "\t".join(fields)


@pytest.mark.parametrize("edit, words", [
    (lambda line: "\t".join(line.split("\t")[1:]), ["train.txt:3", "39 tab-separated field(s), expected 40",
                                                    "no label column"]),
    (lambda line: line + "\textra", ["train.txt:3", "41 tab-separated field(s)"]),
    (lambda line: _replace(line, 0, "2"), ["train.txt:3", "label '2' is not 0 or 1"]),
    (lambda line: _replace(line, 5, "1.5"), ["train.txt:3", "I5 '1.5' is not an integer"]),
    (lambda line: _replace(line, 1, "-"), ["train.txt:3", "I1 '-' is not an integer"]),
    (lambda line: _replace(line, 14, "zz12ab34"), ["train.txt:3", "C1 'zz12ab34' is not hex"]),
    (lambda line: _replace(line, 39, "0x68fd1e64"), ["train.txt:3", "C26 '0x68fd1e64' is not hex"]),
], ids=["no-label", "extra-field", "label", "float-integer", "bare-minus", "not-hex", "hex-prefix"])
def test_bad_lines(tmp_path, model, edit, words):
    lines = criteo_lines()
    lines[2] = edit(lines[2])
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset("widedeep", path, model)
    for word in words:
        assert word in str(err.value)


def test_empty_file_and_wrong_model(tmp_path, model):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DatasetError, match="no rows"):
        load_dataset("widedeep", empty, model)
    narrow = load_model("widedeep", bucket_sizes=BUCKETS[:20], embedding_dim=4, hidden_sizes=(8,))
    tsv = tmp_path / "train.txt"
    tsv.write_text("\n".join(criteo_lines(3)) + "\n")
    with pytest.raises(DatasetError, match="the model takes 13 and 20"):
        load_dataset("widedeep", tsv, narrow)
