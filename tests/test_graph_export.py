"""``ipu-conformance export``: the FP32 ONNX graphs recorded from the models' own code.

onnxruntime (CPU provider) is the oracle: each graph must reproduce the numpy FP32 model within 1e-5 relative error,
``||onnxruntime - numpy||_2 / ||numpy||_2`` per output, on small configs of all six models at a batch size other than
the one the graph was recorded on, and on the stored reference samples of a full-size model. Names: inputs and outputs
as the model's, a dynamic batch axis, node names equal to the layer names the ops are called with (so a precision
policy's skip list names graph nodes).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import onnx
import pytest
from safetensors.numpy import save_file

from conformance.accuracy import reference
from conformance.cli import main
from conformance.graphs import BATCH, OPSET, GraphError, GraphOps, GraphTensor, check, layer_of, record, save, verify
from conformance.graphs import export as export_module
from conformance.graphs.builder import GraphBuilder
from conformance.graphs.runtime import relative_error, run, session
from conformance.hardware.ipu.policy import load_precisions
from models import MODEL_NAMES, load_model
from models.base import InputSpec, Model
from models.ops import Ops, contiguous
from models.seeds import EVAL_SEED

TOLERANCE = 1e-5  # relative L2 error of each output, onnxruntime vs the numpy FP32 model
SMALL = {
    "albert": dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, intermediate_size=48, vocab_size=200,
                   embedding_size=16, max_position_embeddings=64, seq_len=24),
    "bert-base": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=48, vocab_size=200,
                      max_position_embeddings=64, seq_len=24),
    "conformer": dict(hidden_size=32, num_attention_heads=4, intermediate_size=48, conv_depthwise_kernel_size=7,
                      num_hidden_layers=2, feature_bins=16, frames=48),
    "resnet50": dict(embedding_size=8, hidden_sizes=(16, 32), depths=(1, 2), image_size=32, num_labels=10),
    "roformer": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=48, vocab_size=300,
                     embedding_size=16, max_position_embeddings=64, seq_len=40),
    "widedeep": dict(bucket_sizes=(50, 7, 300, 20), num_numeric=5, embedding_dim=4, hidden_sizes=(16, 8)),
}
NODE_KIND = {"linear": "MatMul", "matmul": "MatMul", "conv2d": "Conv", "embedding": "Gather"}


@pytest.fixture(scope="module")
def small():
    """name -> (model, recording, serialised graph, onnxruntime session), each built once."""
    built = {}

    def get(name):
        if name not in built:
            model = load_model(name, **SMALL[name])
            recording = record(model)
            data = recording.model.SerializeToString()
            built[name] = (model, recording, data, session(data))
        return built[name]
    return get


class KindRecorder(Ops):
    """The FP32 ops, noting the layer name and kind of every matrix op and gather."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def linear(self, x, weight, bias=None, *, name):
        self.calls.append((name, "linear"))
        return super().linear(x, weight, bias, name=name)

    def matmul(self, a, b, *, name):
        self.calls.append((name, "matmul"))
        return super().matmul(a, b, name=name)

    def conv2d(self, x, weight, bias=None, *, name, **kwargs):
        self.calls.append((name, "conv2d"))
        return super().conv2d(x, weight, bias, name=name, **kwargs)

    def embedding(self, table, ids, *, name):
        self.calls.append((name, "embedding"))
        return super().embedding(table, ids, name=name)


def assert_close(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert actual[name].shape == value.shape, name
        assert relative_error(actual[name], value) <= TOLERANCE, name


# -- the six models ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_graph_passes_the_full_check_and_reproduces_the_numpy_model(name, small):
    model, recording, data, sess = small(name)
    check(data)
    assert verify(recording, data) <= 1e-5  # the example batch the graph was recorded on
    inputs = model.sample_inputs(3, seed=EVAL_SEED)  # another batch size: the batch axis is dynamic
    assert_close(run(sess, inputs, batch_size=3), model(inputs))


@pytest.mark.parametrize("name, overrides", [
    ("bert-base", dict(SMALL["bert-base"], architecture="BertModel")),  # a plain encoder (all-MiniLM-L6-v2's kind)
    ("albert", dict(SMALL["albert"], num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)),
    ("conformer", dict(SMALL["conformer"], frames=4, hidden_act="gelu")),  # one frame: no relative shift
    ("resnet50", dict(SMALL["resnet50"], downsample_in_first_stage=True, num_channels=1, image_size=33)),
])
def test_config_variants_reproduce_the_numpy_model(name, overrides):
    model = load_model(name, **overrides)
    data = record(model).model.SerializeToString()
    check(data)
    inputs = model.sample_inputs(2, seed=EVAL_SEED)
    assert_close(run(session(data), inputs), model(inputs))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_inputs_and_outputs_are_the_models_with_a_dynamic_batch_axis(name, small):
    model, recording, _, _ = small(name)
    proto = recording.model
    assert proto.opset_import[0].version == OPSET >= 17
    specs = model.input_specs
    assert [i.name for i in proto.graph.input] == [s.name for s in specs]
    for value, spec in zip(proto.graph.input, specs):
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param == BATCH
        assert tuple(d.dim_value for d in dims[1:]) == spec.shape
        assert value.type.tensor_type.elem_type == {"int64": 7, "float32": 1, "bool": 9}[spec.dtype]
    assert [o.name for o in proto.graph.output] == list(model.output_names)
    expected = model(model.sample_inputs(1))
    for value in proto.graph.output:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param == BATCH
        assert tuple(d.dim_value for d in dims[1:]) == expected[value.name].shape[1:]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_node_names_are_the_layer_names(name, small):
    model, recording, _, _ = small(name)
    recorder = KindRecorder()
    layers: list[str] = []
    recorder.recorder = lambda layer, _: layers.append(layer)
    model(model.sample_inputs(1), recorder)
    nodes = {node.name: node.op_type for node in recording.model.graph.node}
    # every application of a layer is a node named after it: layer, layer:1, layer:2, ...
    for layer, count in Counter(layers).items():
        assert all(((layer if k == 0 else f"{layer}:{k}") in nodes) for k in range(count)), layer
    # matrix ops and gathers carry the layer name on the node a precision applies to
    for layer, kind in set(recorder.calls):
        assert nodes[layer] == NODE_KIND[kind], layer
    # and every other node (shape steps, a bias add) is named after the layer or input it comes from
    known = set(layers) | {spec.name for spec in model.input_specs}
    assert {layer_of(node) for node in nodes} <= known


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_initializers_hold_the_checkpoint_tensors_they_are_named_after(name, small):
    model, recording, _, _ = small(name)
    found = set()
    for tensor in recording.model.graph.initializer:
        array = onnx.numpy_helper.to_array(tensor)
        base, transposed = (tensor.name[:-2], True) if tensor.name.endswith(".T") else (tensor.name, False)
        if base in model.params:
            param = model.params[base]
            expected = param.reshape(array.shape[::-1]).T if transposed else param.reshape(array.shape)
            np.testing.assert_array_equal(array, expected, err_msg=tensor.name)
            found.add(base)
    # all but RoFormer's sinusoidal table, whose cos and sin the model takes in numpy once
    assert set(model.params) - found <= {"roformer.encoder.embed_positions.weight"}


def test_precision_policy_skip_lists_name_graph_nodes(small):
    _, fp8 = load_precisions()
    kinds = {"bert-base": "Gather", "resnet50": "Conv"}  # bert's word-embedding Gather; resnet's shortcut conv
    for name, kind in kinds.items():
        skip = fp8[name].skip
        assert skip
        nodes = {node.name: node.op_type for node in small(name)[1].model.graph.node}
        assert all(nodes.get(layer) == kind for layer in skip), (name, skip)


def test_a_shared_layer_is_one_set_of_weights_and_a_node_per_application(small):
    _, recording, _, _ = small("albert")
    graph = recording.model.graph
    query = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"
    assert [n.op_type for n in graph.node if n.name in (query, f"{query}:1", f"{query}:2")] == ["MatMul"] * 3
    assert f"{query}:3" not in {n.name for n in graph.node}
    assert [t.name for t in graph.initializer].count(f"{query}.weight.T") == 1


def test_recording_is_deterministic(small):
    model, _, data, _ = small("bert-base")
    assert record(model).model.SerializeToString() == data


def test_every_op_of_the_contract_is_recorded():
    public = [name for name, member in vars(Ops).items() if callable(member) and not name.startswith("_")]
    assert public and all(name in vars(GraphOps) for name in public)
    # and the emulator and the graph of its precisions have each of them (none falls back to the FP32 one)
    from conformance.graphs.precision import PrecisionGraphOps  # noqa: PLC0415
    from conformance.hardware.ipu.ops import IpuOps  # noqa: PLC0415
    for kind in (IpuOps, PrecisionGraphOps):
        assert [name for name in public if name not in vars(kind)] == [], kind.__name__


# -- a full-size model on its stored reference samples, through the command ------------------------------------------
def test_export_command_full_size_widedeep_reproduces_the_stored_reference(tmp_path, capsys):
    out = tmp_path / "graphs" / "widedeep.onnx"  # a directory that does not exist yet is created
    assert main(["export", "wide&deep", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    model = load_model("widedeep")
    inputs = reference.evaluation_inputs(model)
    assert_close(run(session(out), inputs, batch_size=1024), reference.load("widedeep", model=model))
    metadata = {p.key: p.value for p in check_and_load(out).metadata_props}
    assert metadata["model"] == "widedeep" and metadata["precision"] == "fp32"
    assert json.loads(metadata["config"]) == json.loads(json.dumps(asdict(model.config)))


def check_and_load(path) -> onnx.ModelProto:
    check(path)
    return onnx.load(str(path))


# -- a checkpoint through the command --------------------------------------------------------------------------------
def write_bert_checkpoint(directory, model) -> None:
    directory.mkdir()
    config = {k: v for k, v in asdict(model.config).items() if k not in ("seq_len", "architecture")}
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", **config}))
    save_file({k: np.ascontiguousarray(v) for k, v in model.params.items()}, str(directory / "model.safetensors"))


def test_export_command_reads_a_checkpoint(tmp_path, capsys):
    seeded = load_model("bert-base", **{**SMALL["bert-base"], "seq_len": 64})
    write_bert_checkpoint(tmp_path / "ck", seeded)
    out = tmp_path / "bert.onnx"
    assert main(["export", "bert", "--checkpoint", str(tmp_path / "ck"), "--out", str(out)]) == 0
    assert "checkpoint" in capsys.readouterr().out
    inputs = seeded.sample_inputs(2, seed=EVAL_SEED)  # max_position_embeddings 64: the checkpoint reads 64 tokens
    assert_close(run(session(out), inputs), seeded(inputs))


@pytest.mark.parametrize("case", ["unknown-model", "out-is-a-directory", "out-under-a-file", "checkpoint-missing",
                                  "checkpoint-corrupted"])
def test_export_command_bad_inputs_are_clear_errors(case, tmp_path, capsys):
    out = tmp_path / "g.onnx"
    args, says = {
        "unknown-model": (["gpt5"], ["unknown model 'gpt5'", "bert-base"]),
        "out-is-a-directory": (["widedeep", "--out", str(tmp_path)], ["is a directory"]),
        "out-under-a-file": (["widedeep", "--out", str(tmp_path / "file" / "g.onnx")], ["is not a directory"]),
        "checkpoint-missing": (["widedeep", "--checkpoint", str(tmp_path / "none")], ["does not exist"]),
        "checkpoint-corrupted": (["widedeep", "--checkpoint", str(tmp_path / "ck")], ["corrupted or truncated"]),
    }[case]
    (tmp_path / "file").write_text("a file")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"model_type": "widedeep"}))
    (tmp_path / "ck" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    if "--out" not in args:
        args += ["--out", str(out)]
    assert main(["export", *args]) == 4
    err = capsys.readouterr().err
    assert err.startswith("ipu-conformance export: error: ")
    assert all(text in err for text in says), err
    assert not out.exists() and not list(tmp_path.glob("**/*.onnx"))


def test_export_command_refuses_another_precision(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["export", "widedeep", "--precision", "int8", "--out", str(tmp_path / "g.onnx")])
    assert exited.value.code == 4
    assert "invalid choice: 'int8'" in capsys.readouterr().err


def test_weights_over_the_protobuf_limit_go_to_a_data_file(tmp_path, monkeypatch, small):
    model = small("resnet50")[0]
    monkeypatch.setattr(export_module, "EXTERNAL_DATA_BYTES", 0)
    files = save(record(model), tmp_path / "r.onnx")
    assert files == [tmp_path / "r.onnx", tmp_path / "r.onnx.data"]
    stored = onnx.load(str(tmp_path / "r.onnx"), load_external_data=False).graph.initializer
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored)
    assert (tmp_path / "r.onnx").stat().st_mode == (tmp_path / "r.onnx.data").stat().st_mode
    inputs = model.sample_inputs(2)
    assert_close(run(session(tmp_path / "r.onnx"), inputs), model(inputs))


# -- the shape steps between ops -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToyConfig:
    positions: int = 4
    width: int = 6


class Toy(Model):
    """Every kind of shape step the recording follows, between ops."""

    name = "toy"
    output_names = ("y", "z", "w")

    @property
    def input_specs(self):
        c = self.config
        return (InputSpec("x", (c.positions, c.width), "float", "float32"), InputSpec("mask", (c.positions,), "int", "int64"))

    def sample_inputs(self, batch_size, seed=0):
        rng = np.random.default_rng(seed)
        c = self.config
        return {"x": rng.standard_normal((batch_size, c.positions, c.width)).astype(np.float32),
                "mask": rng.integers(0, 2, (batch_size, c.positions))}

    def forward(self, inputs, ops):
        x = ops.input(inputs["x"], name="x")  # (B, P, W)
        b, p, w = x.shape
        swapped = x.reshape(b, p, w // 2, 2)[..., ::-1].reshape(x.shape)  # pairs swapped
        h = ops.mul(swapped, self.params["scale"], name="scaled")
        t = contiguous(h.transpose(0, 2, 1))[:, 1:5:2, None, :]  # (B, 2, 1, P)
        bias = np.where(inputs["mask"][:, None, None, :] != 0, np.float32(0), np.float32(-5)).astype(np.float32)
        t = ops.add(t, bias, name="masked")
        u = np.concatenate([t, ops.relu(t, name="relu")], axis=1)[:, :, 0, -1]  # (B, 4)
        z = ops.mean(ops.glu(x, axis=-1, name="glu"), axis=1, name="pooled")  # (B, W/2)
        same = (inputs["mask"] == 1).astype(np.float32)  # (B, P)
        w_out = ops.matmul(x.transpose(0, 2, 1)[:, :, -3:], self.params["proj"], name="proj")  # (B, W, 2)
        return {"y": ops.tanh(u, name="y"), "z": z, "w": ops.add(w_out[:, 0, :], same[:, :2], name="w")}


def test_shape_steps_between_ops_are_recorded_exactly():
    rng = np.random.default_rng(1)
    toy = Toy(ToyConfig(), {"scale": rng.standard_normal(6).astype(np.float32),
                            "proj": rng.standard_normal((3, 2)).astype(np.float32)})
    recording = record(toy)
    data = recording.model.SerializeToString()
    check(data)
    inputs = toy.sample_inputs(5, seed=2)
    assert_close(run(session(data), inputs), toy(inputs))


def tensor(shape=(1, 4, 6)):
    graph = GraphBuilder()
    graph.add_input("x", np.float32, (BATCH, *shape[1:]))
    return GraphTensor(graph, "x", np.zeros(shape, np.float32), 0, "x")


@pytest.mark.parametrize("step, refused", [
    (lambda t: np.asarray(t), "converted a recorded tensor"),
    (lambda t: np.ascontiguousarray(t), "converted a recorded tensor"),
    (lambda t: t.reshape(-1, 6), "batch size"),
    (lambda t: t.reshape(t.shape[1], t.shape[0], 6), "mixes the batch axis"),
    (lambda t: t[0], "batch axis"),
    (lambda t: t[:, [0, 1]], "indexing with list"),
    (lambda t: bool(t[:, 0, 0] != 0), "Python branches"),
    (lambda t: np.stack([t, t]), "np.stack"),
    (lambda t: np.concatenate([t, t], axis=0), "along the batch axis"),
])
def test_steps_the_graph_cannot_follow_are_refused(step, refused):
    with pytest.raises(GraphError, match=refused):
        step(tensor())


def test_numpy_arithmetic_on_a_recorded_tensor_is_refused():
    with pytest.raises(TypeError):
        tensor() + np.float32(1)  # arithmetic belongs in the ops


def test_layer_of():
    assert layer_of("a.b.query") == "a.b.query"
    assert layer_of("a.b.query:2/bias") == "a.b.query"
    assert layer_of("a.b.query/bias/Gather:1") == "a.b.query"
