"""Wide & Deep against a torch module written here (torch's own embedding, linear, sigmoid), with weights from the
torch module exported under the documented safetensors names and loaded through ``models.load_model``; seeded weights
and Criteo-like samples; bad checkpoints and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.numpy import load_file, save_file  # noqa: E402

from models import load_model  # noqa: E402
from models.base import CheckpointError, InputError  # noqa: E402
from models.widedeep import CRITEO_KAGGLE_CARDINALITIES, HASH_BUCKET_CAP, WideDeepConfig, save_checkpoint  # noqa: E402

SMALL = dict(bucket_sizes=[7, 130, 3, 1000, 41, 2, 97, 5], num_numeric=5, embedding_dim=6, hidden_sizes=[48, 20, 12])
TOLERANCE = 1e-4  # max abs difference of the probabilities relative to their scale (1)


class TorchWideDeep(torch.nn.Module):
    """Wide & Deep in torch: per-feature wide weights and embedding tables, numeric linear term, ReLU MLP, head."""

    def __init__(self, bucket_sizes, num_numeric, embedding_dim, hidden_sizes):
        super().__init__()
        self.wide_categorical = torch.nn.ModuleList(torch.nn.Embedding(v, 1) for v in bucket_sizes)
        self.wide_numeric = torch.nn.Linear(num_numeric, 1)
        self.embeddings = torch.nn.ModuleList(torch.nn.Embedding(v, embedding_dim) for v in bucket_sizes)
        widths = [len(bucket_sizes) * embedding_dim + num_numeric, *hidden_sizes]
        self.mlp = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.head = torch.nn.Linear(widths[-1], 1)

    def forward(self, ids, numeric):
        wide = sum(table(ids[:, f]) for f, table in enumerate(self.wide_categorical)) + self.wide_numeric(numeric)
        h = torch.cat([table(ids[:, f]) for f, table in enumerate(self.embeddings)] + [numeric], dim=1)
        for layer in self.mlp:
            h = torch.relu(layer(h))
        click = torch.sigmoid(wide + self.head(h))
        return torch.cat([1 - click, click], dim=1)

    def export(self) -> dict[str, np.ndarray]:
        """The module's weights under the checkpoint names documented in models/widedeep.py."""
        tensors = {}
        for f, table in enumerate(self.wide_categorical):
            tensors[f"wide.categorical.{f}.weight"] = table.weight
        tensors["wide.numeric.weight"], tensors["wide.numeric.bias"] = self.wide_numeric.weight, self.wide_numeric.bias
        for f, table in enumerate(self.embeddings):
            tensors[f"deep.embeddings.{f}.weight"] = table.weight
        for k, layer in enumerate(self.mlp):
            tensors[f"deep.mlp.{k}.weight"], tensors[f"deep.mlp.{k}.bias"] = layer.weight, layer.bias
        tensors["deep.head.weight"], tensors["deep.head.bias"] = self.head.weight, self.head.bias
        return {k: v.detach().numpy().copy() for k, v in tensors.items()}


def write_checkpoint(directory: Path, seed: int = 0) -> TorchWideDeep:
    torch.manual_seed(seed)
    module = TorchWideDeep(**SMALL).eval()
    with torch.no_grad():
        for table in module.wide_categorical:
            table.weight.normal_(0, 0.3)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "widedeep", **SMALL}))
    save_file(module.export(), str(directory / "model.safetensors"))
    return module


def torch_probabilities(module, inputs) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(inputs["categorical_ids"]), torch.from_numpy(inputs["numeric_features"])).numpy()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("widedeep_small")
    return directory, write_checkpoint(directory)


def test_matches_torch_module(checkpoint):
    directory, module = checkpoint
    model = load_model("widedeep", checkpoint=directory)
    assert model.config.bucket_sizes == tuple(SMALL["bucket_sizes"])
    inputs = model.sample_inputs(257, seed=3)
    expected = torch_probabilities(module, inputs)
    got = model(inputs)["probabilities"]
    assert got.shape == (257, 2) and got.dtype == np.float32
    assert np.abs(got - expected).max() < TOLERANCE, f"max diff {np.abs(got - expected).max()}"
    assert 0.02 < expected[:, 1].std()  # the check compares probabilities that actually vary


def test_save_checkpoint_round_trip(tmp_path):
    model = load_model("widedeep", seed=2, **SMALL)
    save_checkpoint(model, tmp_path)
    again = load_model("widedeep", checkpoint=tmp_path)
    assert again.config == model.config
    inputs = model.sample_inputs(16)
    assert np.array_equal(again(inputs)["probabilities"], model(inputs)["probabilities"])


def test_seeded_weights_and_samples_are_deterministic():
    a, b, c = (load_model("widedeep", seed=s, **SMALL) for s in (4, 4, 5))
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["deep.embeddings.3.weight"], c.params["deep.embeddings.3.weight"])
    x1, x2, x3 = a.sample_inputs(512, seed=0), b.sample_inputs(512, seed=0), a.sample_inputs(512, seed=1)
    assert all(np.array_equal(x1[k], x2[k]) for k in x1)
    assert not np.array_equal(x1["categorical_ids"], x3["categorical_ids"])
    # click probabilities spread around Criteo's click rate, few near-ties at the 0.5 threshold
    click = a(x1)["probabilities"][:, 1]
    assert 0.15 < click.mean() < 0.4 and click.std() > 0.1
    assert np.mean(np.abs(click - 0.5) < 0.01) < 0.05


def test_samples_are_criteo_like():
    model = load_model("widedeep", seed=0, **SMALL)
    x = model.sample_inputs(4096, seed=0)
    ids, numeric = x["categorical_ids"], x["numeric_features"]
    assert ids.dtype == np.int64 and numeric.dtype == np.float32
    assert np.all((ids >= 0) & (ids < np.array(SMALL["bucket_sizes"])))
    # Zipf: the most frequent category of a 1000-bucket feature takes a large share, many categories are rare
    _, counts = np.unique(ids[:, 3], return_counts=True)
    assert counts.max() > 0.2 * len(ids) and np.sum(counts == 1) > 10
    # log1p of heavy-tailed counts: non-negative, missing values are 0, a long right tail
    assert numeric.min() >= 0 and np.mean(numeric == 0) > 0.05 and numeric.max() > 3 * numeric.mean()


def test_default_config_uses_capped_criteo_cardinalities():
    config = WideDeepConfig()
    assert config.num_categorical == 26 and config.num_numeric == 13
    assert config.bucket_sizes == tuple(min(c, HASH_BUCKET_CAP) for c in CRITEO_KAGGLE_CARDINALITIES)
    assert max(config.bucket_sizes) == HASH_BUCKET_CAP


# -- bad checkpoints and inputs ------------------------------------------------------------------------------------------
def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model("widedeep", checkpoint=tmp_path / "nope")


def _rewrite(directory: Path, edit) -> None:
    tensors = load_file(str(directory / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"))


def test_missing_tensor(tmp_path):
    write_checkpoint(tmp_path)
    _rewrite(tmp_path, lambda t: t.pop("deep.embeddings.6.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'deep\.embeddings\.6\.weight' of shape \(97, 6\)"):
        load_model("widedeep", checkpoint=tmp_path)


def test_wrong_shape_tensor(tmp_path):
    write_checkpoint(tmp_path)
    _rewrite(tmp_path, lambda t: t.__setitem__("deep.mlp.1.weight", np.zeros((48, 20), np.float32)))
    with pytest.raises(CheckpointError, match=r"'deep\.mlp\.1\.weight' has shape \(48, 20\), expected \(20, 48\)"):
        load_model("widedeep", checkpoint=tmp_path)


def test_truncated_file(tmp_path):
    write_checkpoint(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="model.safetensors.*(corrupted|truncated)"):
        load_model("widedeep", checkpoint=tmp_path)


def test_wrong_model_type(tmp_path):
    write_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "resnet", **SMALL}))
    with pytest.raises(CheckpointError, match="model_type is 'resnet', expected 'widedeep'"):
        load_model("widedeep", checkpoint=tmp_path)


def _good_inputs(batch=4):
    rng = np.random.default_rng(0)
    return {"categorical_ids": rng.integers(0, 2, (batch, 8)), "numeric_features": rng.random((batch, 5)).astype(np.float32)}


@pytest.mark.parametrize("name, value, message", [
    ("categorical_ids", np.zeros((4, 9), np.int64), r"'categorical_ids' has shape \(4, 9\), expected .*\(batch, 8\)"),
    ("categorical_ids", np.zeros((4, 8), np.float32), r"'categorical_ids' has dtype float32, expected int"),
    ("numeric_features", np.zeros((4, 5), np.int32), r"'numeric_features' has dtype int32, expected float"),
    ("numeric_features", np.zeros((3, 5), np.float32), r"'numeric_features' has batch 3, other inputs have 4"),
    ("numeric_features", np.array([[0, 1, np.nan, 0, 0]] * 4, np.float32), r"'numeric_features' contains NaN"),
    ("categorical_ids", np.array([[0, 0, 3, 0, 0, 0, 0, 0]] * 4), r"id 3 for feature 2 .*expected hashed ids in \[0, 3\)"),
    ("categorical_ids", np.array([[0, 0, 0, 0, 0, 0, -1, 0]] * 4), r"id -1 for feature 6 .*expected hashed ids in \[0, 97\)"),
], ids=["ids-shape", "ids-dtype", "numeric-dtype", "batch-mismatch", "nan", "id-too-large", "id-negative"])
def test_bad_inputs(checkpoint, name, value, message):
    model = load_model("widedeep", checkpoint=checkpoint[0])
    inputs = {**_good_inputs(), name: value}
    with pytest.raises(InputError, match=message):
        model(inputs)
