"""The conformer .npz reader: arrays come through as the model's inputs, shapes are checked against the model's config,
pickled arrays are refused, and there are no labels."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.datasets import DatasetError, load_dataset, sha256_files
from models import load_model

SMALL = dict(hidden_size=16, num_attention_heads=2, intermediate_size=32, conv_depthwise_kernel_size=3,
             num_hidden_layers=1, feature_bins=8, frames=16)  # 16 frames -> 4 after subsampling


@pytest.fixture(scope="module")
def model():
    return load_model("conformer", **SMALL)


def arrays(n: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((n, 3, 8, 16))  # float64 in the file
    mask = np.zeros((n, 4), bool)
    mask[1, 3:] = True
    mask[2, 1:] = True
    return src, mask


def write(path, **arrays_):
    np.savez(path, **arrays_)
    return path


def test_reads_inputs(tmp_path, model):
    src, mask = arrays()
    path = write(tmp_path / "utterances.npz", src=src, src_pad_mask=mask, lengths=np.array([16, 12, 4]))
    data = load_dataset("conformer", path, model)
    assert data.inputs["src"].dtype == np.float32 and data.inputs["src_pad_mask"].dtype == np.bool_
    np.testing.assert_array_equal(data.inputs["src"], src.astype(np.float32))
    np.testing.assert_array_equal(data.inputs["src_pad_mask"], mask)
    assert data.units == 3 and not data.labelled and data.scorer is None
    outputs = model(data.inputs)
    assert outputs["memory"].shape == (3, 4, 16) and np.isfinite(outputs["memory"]).all()
    assert data.label_metrics(outputs) == {}
    prov = data.provenance
    assert prov["format"] == "conformer-npz" and prov["labels"] == "none (tensor gates only)"
    assert prov["units"] == prov["rows"] == 3 and prov["sha256"] == sha256_files([path])
    assert prov["preprocessing"]["padded_fraction"] == pytest.approx(4 / 12, abs=1e-4)

    first = load_dataset("conformer", path, model, limit=2)
    assert first.units == 2
    np.testing.assert_array_equal(first.inputs["src"], data.inputs["src"][:2])


def test_integer_mask_of_zeros_and_ones(tmp_path, model):
    src, mask = arrays()
    data = load_dataset("conformer", write(tmp_path / "a.npz", src=src, src_pad_mask=mask.astype(np.uint8)), model)
    np.testing.assert_array_equal(data.inputs["src_pad_mask"], mask)


def _bad_cases():
    src, mask = arrays()
    nan = src.copy()
    nan[1, 2, 3, 4] = np.nan
    all_padded = mask.copy()
    all_padded[0] = True
    int_mask = mask.astype(np.int64)
    int_mask[0, 0] = 2
    return [
        ("src-shape", dict(src=src[:, :, :6], src_pad_mask=mask),
         ["array 'src' has shape (3, 3, 6, 16), expected (N, 3, 8, 16)"]),
        ("src-ndim", dict(src=src[:, 0], src_pad_mask=mask), ["array 'src' has shape (3, 8, 16)"]),
        ("mask-shape", dict(src=src, src_pad_mask=np.zeros((3, 16), bool)),
         ["array 'src_pad_mask' has shape (3, 16), expected (N, 4)", "16 / 4"]),
        ("count", dict(src=src, src_pad_mask=mask[:2]), ["'src' has 3 utterances, 'src_pad_mask' 2"]),
        ("missing", dict(src=src, mask=mask), ["no array(s) ['src_pad_mask']", "['mask', 'src']"]),
        ("object", dict(src=src, src_pad_mask=np.array([mask[0], "x"], dtype=object)),
         ["'src_pad_mask' cannot be read without pickle"]),
        ("int-src", dict(src=src.astype(np.int32), src_pad_mask=mask), ["'src' has dtype int32, expected float"]),
        ("mask-values", dict(src=src, src_pad_mask=int_mask), ["dtype int64 with values other than 0/1"]),
        ("float-mask", dict(src=src, src_pad_mask=mask.astype(np.float32)), ["'src_pad_mask' has dtype float32"]),
        ("nan", dict(src=nan, src_pad_mask=mask), ["1 non-finite value(s)", "(1, 2, 3, 4)"]),
        ("all-padded", dict(src=src, src_pad_mask=all_padded), ["every frame of utterance(s) [0]"]),
        ("empty", dict(src=src[:0], src_pad_mask=mask[:0]), ["no utterances"]),
    ]


@pytest.mark.parametrize("case, content, words", _bad_cases(), ids=[c[0] for c in _bad_cases()])
def test_bad_npz(tmp_path, model, case, content, words):
    path = write(tmp_path / "bad.npz", **content)
    with pytest.raises(DatasetError) as err:
        load_dataset("conformer", path, model)
    assert "bad.npz" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_not_an_npz(tmp_path, model):
    text = tmp_path / "features.npz"
    text.write_text("not an archive")
    with pytest.raises(DatasetError, match="not a readable .npz archive"):
        load_dataset("conformer", text, model)
    single = tmp_path / "src.npy"
    np.save(single, arrays()[0])
    with pytest.raises(DatasetError, match="a single .npy array"):
        load_dataset("conformer", single, model)
