"""Hostile graphs and data sets: a valid ONNX graph and a valid file of each data format, mutated the way a probe
would (bytes cut, flipped or appended; a graph's op, shapes, opset, names and initializers edited; a data file's
fields given hostile values). The rule, for every example: the input is read, or it is refused with the suite's own
error naming the file (a usage error, exit 4, at the command line); never another exception, never a hang (a
per-example deadline). Hypothesis runs derandomized: the same examples on every machine."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from conformance.datasets import DatasetError
from conformance.datasets.cail import read_triplets
from conformance.datasets.criteo import parse_rows
from conformance.datasets.images import read_val_map
from conformance.datasets.speech import read_arrays
from conformance.datasets.squad import read_questions
from conformance.graphs.case import GraphCase, GraphCaseError

PROPERTY = settings(max_examples=100, deadline=timedelta(seconds=20), database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HOSTILE_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "-1", "1e309", "nan", "\u0000", "\ufeff", "9" * 400, "\u202e", "../../etc/passwd", "{", "["]),
)
HOSTILE_NUMBER = st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
                           st.sampled_from([0, -1, 2 ** 31, 2 ** 63, 10 ** 30]))
HOSTILE_JSON = st.one_of(HOSTILE_TEXT, HOSTILE_NUMBER, st.none(), st.booleans(), st.just([]), st.just({}),
                         st.lists(st.integers(), max_size=3))


def _bytes_mutation():
    """A function of the file's bytes: cut at a point, bytes overwritten, or garbage appended."""
    cut = st.floats(0, 1).map(lambda f: lambda data: data[:int(len(data) * f)])
    flips = st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8).map(
        lambda pairs: lambda data: _flip(data, pairs))
    append = st.binary(min_size=1, max_size=64).map(lambda tail: lambda data: data + tail)
    return st.one_of(cut, flips, append)


def _flip(data: bytes, pairs) -> bytes:
    out = bytearray(data)
    for where, value in pairs:
        if out:
            out[min(int(where * len(out)), len(out) - 1)] = value
    return bytes(out)


# -- graphs ---------------------------------------------------------------------------------------------------------
def _graph() -> onnx.ModelProto:
    """A small valid graph: Relu(x @ W + b), x (N, 4) float."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "b"], ["z"], name="add"),
             helper.make_node("Relu", ["z"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _edit(kind: str, value):
    def edit(model: onnx.ModelProto) -> None:
        graph = model.graph
        if kind == "op_type":
            graph.node[int(abs(hash(str(value)))) % 3].op_type = str(value)[:40]
        elif kind == "dim":
            dim = graph.input[0].type.tensor_type.shape.dim[1]
            dim.dim_value = int(value) if isinstance(value, int) and 0 <= value < 2 ** 63 else 0
        elif kind == "opset":
            model.opset_import[0].version = int(value) if isinstance(value, int) and -2 ** 63 <= value < 2 ** 63 else 0
        elif kind == "input_name":
            graph.node[1].input[0] = str(value)[:40]
        elif kind == "drop_initializer":
            del graph.initializer[0]
        elif kind == "initializer_dims":
            graph.initializer[0].dims[0] = int(value) if isinstance(value, int) and -2 ** 63 <= value < 2 ** 63 else 0
        elif kind == "attribute":
            graph.node[2].attribute.append(helper.make_attribute("alpha", 1.0))
        elif kind == "elem_type":
            graph.input[0].type.tensor_type.elem_type = int(value) % 64 if isinstance(value, int) else 0
    return edit


GRAPH_EDITS = st.tuples(st.sampled_from(["op_type", "dim", "opset", "input_name", "drop_initializer",
                                         "initializer_dims", "attribute", "elem_type"]),
                        st.one_of(HOSTILE_TEXT, st.integers(-2 ** 64, 2 ** 64))).map(lambda kv: _edit(*kv))


def _judge_graph(path: Path) -> None:
    try:
        GraphCase("probe", path, calibrates=False)
    except GraphCaseError as exc:
        assert f"--onnx probe={path}" in str(exc), str(exc)


@PROPERTY
@given(edits=st.lists(GRAPH_EDITS, min_size=1, max_size=3))
def test_an_edited_graph_is_read_or_refused_naming_it(tmp_path_factory, edits):
    model = _graph()
    for edit in edits:
        edit(model)
    path = tmp_path_factory.mktemp("graph") / "model.onnx"
    path.write_bytes(model.SerializeToString())
    _judge_graph(path)


@PROPERTY
@given(mutation=_bytes_mutation())
def test_a_damaged_graph_file_is_read_or_refused_naming_it(tmp_path_factory, mutation):
    path = tmp_path_factory.mktemp("graph") / "model.onnx"
    path.write_bytes(mutation(_graph().SerializeToString()))
    _judge_graph(path)


def test_the_unedited_graph_is_read(tmp_path):
    """The base of the mutations is valid: what the properties refuse is the edit's doing."""
    path = tmp_path / "model.onnx"
    path.write_bytes(_graph().SerializeToString())
    assert GraphCase("probe", path, calibrates=False).model is not None


# -- data sets ------------------------------------------------------------------------------------------------------
def _squad() -> bytes:
    context = "The chip computes in sixteen bits and in eight bits."
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "In how many bits?", "answers": [{"text": "sixteen bits", "answer_start": 21}]},
        {"id": "q2", "question": "And?", "answers": [{"text": "eight bits", "answer_start": 41}]}]}]}]}).encode()


def _cail() -> bytes:
    lines = [{"A": "甲方借款一万元。", "B": "乙方借款两万元。", "C": "丙方租房一年。", "label": "B"},
             {"A": "借款合同纠纷。", "B": "租赁合同纠纷。", "C": "借贷纠纷一案。", "label": "C"}]
    return "\n".join(json.dumps(line, ensure_ascii=False) for line in lines).encode() + b"\n"


def _criteo() -> bytes:
    row = "\t".join(["1", *[str(i) for i in range(13)], *[f"{i:08x}" for i in range(26)]])
    return (row + "\n" + row.replace("1\t", "0\t", 1) + "\n").encode()


def _val_map() -> bytes:
    return b"a.png 3\nb.png 7\n"


def _speech(path: Path) -> bytes:
    src = np.random.default_rng(0).standard_normal((2, 3, 8, 16)).astype(np.float32)
    np.savez(path, src=src, src_pad_mask=np.zeros((2, 4), bool))
    return path.read_bytes()


READERS = {
    "squad.json": (lambda p: read_questions(p), lambda p: _squad()),
    "cail.jsonl": (lambda p: read_triplets(p), lambda p: _cail()),
    "criteo.tsv": (lambda p: parse_rows(p, [7] * 26), lambda p: _criteo()),
    "val_map.txt": (lambda p: read_val_map(p, None), lambda p: _val_map()),
    "speech.npz": (lambda p: read_arrays(p), _speech),
}


def _judge_data(read, path: Path) -> None:
    try:
        read(path)
    except DatasetError as exc:
        assert str(path) in str(exc) or path.name in str(exc), str(exc)


@pytest.mark.parametrize("name", sorted(READERS))
def test_the_unedited_data_files_are_read(tmp_path, name):
    read, make = READERS[name]
    path = tmp_path / name
    path.write_bytes(make(path))
    read(path)


@pytest.mark.parametrize("name", sorted(READERS))
@PROPERTY
@given(mutation=_bytes_mutation())
def test_a_damaged_data_file_is_read_or_refused_naming_it(tmp_path_factory, name, mutation):
    read, make = READERS[name]
    path = tmp_path_factory.mktemp("data") / name
    path.write_bytes(mutation(make(path)))
    _judge_data(read, path)


def _set_path(document, keys, value):
    target = document
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value


SQUAD_FIELDS = [("data",), ("data", 0, "paragraphs"), ("data", 0, "paragraphs", 0, "context"),
                ("data", 0, "paragraphs", 0, "qas", 0, "id"), ("data", 0, "paragraphs", 0, "qas", 0, "question"),
                ("data", 0, "paragraphs", 0, "qas", 0, "answers"),
                ("data", 0, "paragraphs", 0, "qas", 0, "answers", 0, "text"),
                ("data", 0, "paragraphs", 0, "qas", 0, "answers", 0, "answer_start")]


@PROPERTY
@given(field=st.sampled_from(SQUAD_FIELDS), value=HOSTILE_JSON)
def test_a_squad_field_of_any_value_is_read_or_refused_naming_the_file(tmp_path_factory, field, value):
    document = json.loads(_squad())
    _set_path(document, field, value)
    path = tmp_path_factory.mktemp("squad") / "dev.json"
    path.write_text(json.dumps(document))
    _judge_data(read_questions, path)


@PROPERTY
@given(field=st.sampled_from(["A", "B", "C", "label"]), value=HOSTILE_JSON)
def test_a_cail_field_of_any_value_is_read_or_refused_naming_the_file(tmp_path_factory, field, value):
    lines = [json.loads(line) for line in _cail().decode().splitlines()]
    lines[1][field] = value
    path = tmp_path_factory.mktemp("cail") / "test.jsonl"
    path.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in lines))
    _judge_data(read_triplets, path)


@PROPERTY
@given(column=st.integers(0, 39), value=HOSTILE_TEXT)
def test_a_criteo_field_of_any_value_is_read_or_refused_naming_the_file(tmp_path_factory, column, value):
    rows = [line.split("\t") for line in _criteo().decode().splitlines()]
    rows[1][column] = value
    path = tmp_path_factory.mktemp("criteo") / "day.tsv"
    path.write_bytes("\n".join("\t".join(row) for row in rows).encode("utf-8", "surrogatepass"))
    _judge_data(lambda p: parse_rows(p, [7] * 26), path)


@PROPERTY
@given(name=HOSTILE_TEXT, label=st.one_of(HOSTILE_TEXT, HOSTILE_NUMBER.map(str)))
def test_a_val_map_line_of_any_text_is_read_or_refused_naming_the_file(tmp_path_factory, name, label):
    path = tmp_path_factory.mktemp("images") / "val_map.txt"
    path.write_bytes(b"a.png 3\n" + f"{name} {label}\n".encode("utf-8", "surrogatepass"))
    _judge_data(lambda p: read_val_map(p, None), path)


@PROPERTY
@given(shape=st.lists(st.integers(0, 5), min_size=0, max_size=5), dtype=st.sampled_from(["f4", "f8", "f2", "i8", "u1",
                                                                                         "b1", "c8", "U3", "O"]),
       key=st.sampled_from(["src", "src_pad_mask", "other"]))
def test_a_speech_array_of_any_shape_and_type_is_read_or_refused_naming_the_file(tmp_path_factory, shape, dtype, key):
    path = tmp_path_factory.mktemp("speech") / "utterances.npz"
    src = np.random.default_rng(0).standard_normal((2, 3, 8, 16)).astype(np.float32)
    arrays = {"src": src, "src_pad_mask": np.zeros((2, 4), bool)}
    arrays[key] = np.zeros(shape, dtype=object if dtype == "O" else dtype)
    np.savez(path, **arrays)
    _judge_data(read_arrays, path)
