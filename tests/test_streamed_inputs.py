"""A user's evaluation set streamed: the engine takes a source that reads each batch's rows when the run reaches them,
an image folder gives one (its listing and labels read up front, its pixels per batch), and a streamed set gives the
bits and records of the same set read whole, serially and on two workers, while holding about one batch at a time."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers

import conformance.datasets as datasets
from conformance.accuracy.evaluation import reference_batches, reference_on_engine
from conformance.datasets import DatasetError, load_dataset
from conformance.datasets import base as datasets_base
from conformance.datasets import criteo
from conformance.datasets.criteo import CriteoSource
from conformance.datasets.images import ImageSource
from conformance.datasets.user import load_cases
from conformance.distributed import (
    BatchSource,
    BatchStore,
    Engine,
    make_engine,
    pick,
    row_count,
    row_elements,
    take,
)
from conformance.hardware import get_backend
from conformance.test_accuracy import AccuracyRuns
from models import load_model
from tests import test_dataset_criteo as criteo_data
from tests import test_dataset_images as images

REPO = Path(__file__).resolve().parents[1]
BATCH = 3
# the formats' tests' tiny resnet, its first stage wider than its stem (so it has the shortcut convolution that FP8
# keeps in FP16)
TINY = {**images.TINY, "hidden_sizes": [16, 16, 16, 32]}
# what an accuracy record's details say about the host, not the figure: its timings and the engine's stats
HOST_FACTS = ("calibration_s", "run_s", "op_checks_s", "engine")


def _image_folder(folder: Path, count: int, seed: int = 1) -> Path:
    """``count`` images of varied sizes and modes and their val_map.txt."""
    rng = np.random.default_rng(seed)
    entries = []
    for i in range(count):
        size = (int(rng.integers(150, 330)), int(rng.integers(150, 330)))
        name = f"img{i}.{'png' if i % 3 else 'jpg'}"
        images.write_image(folder / name, size, "L" if i % 5 == 4 else "RGB", seed=i)
        entries.append((name, int(rng.integers(0, images.TINY["num_labels"]))))
    images.write_val_map(folder, entries)
    return folder


@pytest.fixture(scope="module")
def user_data(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny resnet checkpoint (transformers' layout) and a folder of 8 images: 3 batches of 3 (the last short)."""
    root = tmp_path_factory.mktemp("streamed")
    ckpt = root / "resnet"
    torch.manual_seed(0)
    reference = transformers.ResNetForImageClassification(transformers.ResNetConfig(**TINY)).eval()
    images.randomize_(reference, 0)
    reference.save_pretrained(ckpt)
    return ckpt, _image_folder(root / "val", 8)


@pytest.fixture(scope="module")
def workers():
    with make_engine(workers=2) as engine:
        yield engine


def _cases(user_data, stream: bool, monkeypatch, name: str = "resnet50") -> dict:
    """The user's case of ``name``, its data streamed or read whole."""
    ckpt, data = user_data
    with monkeypatch.context() as patch:
        if not stream:
            patch.setattr(datasets, "STREAMED_FORMATS", set())
        cases = load_cases((name,), {name: ckpt} if ckpt else {}, {name: data}, {})
    assert cases[name].evaluation.streamed is stream
    return cases


def _runs(engine, cases: dict, cache_dir: Path, batch: int = BATCH) -> AccuracyRuns:
    """The accuracy tests' runs of the user's case in batches of ``batch`` on ``engine``."""
    settings = SimpleNamespace(onnx={}, cache_dir=cache_dir, workers=None, cluster=None,
                               profile_data=SimpleNamespace(batch_size={name: batch for name in cases}),
                               sample_count=lambda name: 0)
    model_store = SimpleNamespace(get=lambda name: cases[name].model)
    runs = AccuracyRuns(settings, get_backend("ipu"), model_store, cases, None)
    runs._engine = engine
    return runs


class CountingSource(BatchSource):
    """Arrays given through the source interface, counting the rows read (what a run reads, and when)."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays, self.reads = arrays, []

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))

    @property
    def row_spec(self):
        return {k: (v.shape[1:], v.dtype) for k, v in self.arrays.items()}

    def take(self, start, stop):
        self.reads.append((start, stop))
        return {k: v[start:stop].copy() for k, v in self.arrays.items()}


# -- the source interface ---------------------------------------------------------------------------------------------
def test_the_helpers_give_a_sources_rows_as_a_dicts():
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((7, 2, 3)).astype(np.float32), "ids": np.arange(7, dtype=np.int64)}
    source = CountingSource(arrays)
    assert row_count(source) == row_count(arrays) == 7
    assert row_elements(source) == row_elements(arrays) == 7
    assert source.row_bytes == 2 * 3 * 4 + 8
    for got, want in ((take(source, 2, 5), take(arrays, 2, 5)), (pick(source, [4, 0, 6]), pick(arrays, [4, 0, 6]))):
        assert sorted(got) == sorted(want)
        assert all(np.array_equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)
    assert {k: v.shape for k, v in pick(source, []).items()} == {"x": (0, 2, 3), "ids": (0,)}
    with pytest.raises(IndexError, match="rows 5:8 of a source of 7 rows"):
        take(source, 5, 8)


def test_an_image_source_reads_the_bits_of_the_whole_set_in_any_batch(user_data, monkeypatch):
    ckpt, folder = user_data
    model = load_cases(("resnet50",), {"resnet50": ckpt}, {}, {})["resnet50"].model
    streamed = load_dataset("resnet50", folder, model, checkpoint=ckpt, stream=True)
    whole = load_dataset("resnet50", folder, model, checkpoint=ckpt)
    assert isinstance(streamed.inputs, ImageSource) and isinstance(whole.inputs, dict)
    assert streamed.provenance == whole.provenance and streamed.units == whole.units == streamed.rows == 8
    pixels = whole.inputs["pixel_values"]
    assert streamed.inputs.row_spec == {"pixel_values": (pixels.shape[1:], pixels.dtype)}
    for start, stop in ((0, 8), (0, 3), (3, 6), (6, 8), (5, 6)):
        assert np.array_equal(take(streamed.inputs, start, stop)["pixel_values"], pixels[start:stop])
    assert np.array_equal(streamed.whole()["pixel_values"], pixels)
    logits = {"logits": np.random.default_rng(2).standard_normal((8, images.TINY["num_labels"])).astype(np.float32)}
    assert ({k: m.value for k, m in streamed.label_metrics(logits).items()}
            == {k: m.value for k, m in whole.label_metrics(logits).items()})


def test_a_streamed_image_that_cannot_be_decoded_is_named(user_data, tmp_path):
    """Headers are checked before any model runs; pixels that fail to decode later name the file and its line."""
    ckpt, _ = user_data
    model = load_cases(("resnet50",), {"resnet50": ckpt}, {}, {})["resnet50"].model
    folder = _image_folder(tmp_path / "val", 4)
    (folder / "img1.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError, match=r"1 image\(s\) Pillow cannot decode: 'img1.png' \(val_map.txt:2"):
        load_dataset("resnet50", folder, model, checkpoint=ckpt, stream=True)
    _image_folder(folder, 4)
    data = (folder / "img0.jpg").read_bytes()
    (folder / "img0.jpg").write_bytes(data[: len(data) // 2])  # a valid header, truncated pixels
    streamed = load_dataset("resnet50", folder, model, checkpoint=ckpt, stream=True)
    assert take(streamed.inputs, 1, 4)["pixel_values"].shape[0] == 3  # the other rows read
    with pytest.raises(DatasetError, match=r"'img0.jpg' \(val_map.txt:1"):
        take(streamed.inputs, 0, 2)


# -- same bits, same records ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["serial", "workers"])
def test_a_streamed_set_gives_the_bits_of_the_set_read_whole(engine, user_data, workers, tmp_path, monkeypatch):
    """FP32 reference and fp16/fp8 runs (with the probe) of the user's images streamed and read whole: the same outputs,
    local errors and FP8 scales; the streamed run finds every batch the whole run stored (the same batch keys)."""
    engine = workers if engine == "workers" else Engine()
    monkeypatch.setattr(engine, "store", BatchStore(tmp_path / "store"))
    whole = _runs(engine, _cases(user_data, False, monkeypatch), tmp_path / "whole")
    streamed = _runs(engine, _cases(user_data, True, monkeypatch), tmp_path / "streamed")
    source = streamed.user_cases["resnet50"].evaluation.inputs
    reads = []
    monkeypatch.setattr(source, "take", lambda start, stop, read=source.take: reads.append((start, stop)) or
                        read(start, stop))
    (_, expected), (inputs, outputs) = whole.reference("resnet50"), streamed.reference("resnet50")
    assert inputs is source and streamed.count("resnet50") == whole.count("resnet50") == 8
    assert sorted(outputs) == sorted(expected) and all(np.array_equal(outputs[k], expected[k]) for k in expected)
    assert reads == [(b.start, b.stop) for b in reference_batches(8, BATCH)]  # one batch at a time, never whole
    assert streamed.fp32_runs["resnet50"]["from_store"] == whole.fp32_runs["resnet50"]["computed"] == 3
    for precision in ("fp16", "fp8"):
        a, b = whole.hardware("resnet50", precision, probe=True), streamed.hardware("resnet50", precision, probe=True)
        assert all(np.array_equal(a["outputs"][k], b["outputs"][k]) for k in a["outputs"])
        assert a["local_errors"] == b["local_errors"] and a["details"] == b["details"]
        assert b["engine"]["computed"] == 0 and b["engine"]["from_store"] == a["engine"]["computed"] >= 3
    assert max(stop - start for start, stop in reads) <= BATCH


@pytest.fixture
def criteo_rows(tmp_path, monkeypatch) -> Path:
    """50 Criteo rows, the offset of every 4th kept when streamed (so that batches start between them)."""
    monkeypatch.setattr(criteo, "INDEX_STRIDE", 4)
    path = tmp_path / "day_23.tsv"
    path.write_text("\n".join(criteo_data.criteo_lines(50, seed=7)) + "\n")
    return path


def test_a_criteo_source_parses_the_bits_of_the_whole_file_in_any_batch(criteo_rows):
    model = load_model("widedeep", seed=0)
    streamed = load_dataset("widedeep", criteo_rows, model, stream=True)
    whole = load_dataset("widedeep", criteo_rows, model)
    assert isinstance(streamed.inputs, CriteoSource) and streamed.provenance == whole.provenance
    assert streamed.rows == streamed.inputs.rows == 50
    assert streamed.inputs.index == [whole_offset(criteo_rows, row) for row in range(0, 50, 4)]
    for start, stop in ((0, 50), (0, 7), (3, 4), (4, 8), (5, 13), (48, 50), (49, 50), (20, 20)):
        part = take(streamed.inputs, start, stop)
        assert sorted(part) == sorted(whole.inputs)
        for k, v in whole.inputs.items():
            assert part[k].dtype == v.dtype and np.array_equal(part[k], v[start:stop]), (k, start, stop)
    probabilities = np.random.default_rng(3).random((50, 1)).astype(np.float32)
    assert ({k: m.value for k, m in streamed.label_metrics({"probabilities": probabilities}).items()}
            == {k: m.value for k, m in whole.label_metrics({"probabilities": probabilities}).items()})
    limited = load_dataset("widedeep", criteo_rows, model, limit=9, stream=True)
    assert limited.rows == 9 and np.array_equal(limited.whole()["numeric_features"],
                                                whole.inputs["numeric_features"][:9])


def whole_offset(path: Path, rows: int) -> int:
    """The byte offset of row ``rows`` of a text file."""
    return sum(len(line) for line in path.read_bytes().splitlines(keepends=True)[:rows])


def test_a_compressed_or_malformed_criteo_file_is_not_streamed_past_its_errors(criteo_rows, tmp_path):
    """A .gz file cannot be read from the middle: it is read whole (and checked against the budget) as before; a bad
    line anywhere is found before any model runs."""
    model = load_model("widedeep", seed=0)
    gz = tmp_path / "day_23.tsv.gz"
    gz.write_bytes(gzip.compress(criteo_rows.read_bytes()))
    assert not load_dataset("widedeep", gz, model, stream=True).streamed
    lines = criteo_rows.read_text().splitlines()
    lines[41] = lines[41].replace("\t", "\tx", 1)
    criteo_rows.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"day_23.tsv:42: I1 'x"):
        load_dataset("widedeep", criteo_rows, model, stream=True)


@pytest.mark.parametrize("engine", ["serial", "workers"])
def test_streamed_criteo_rows_give_the_bits_of_the_rows_read_whole(engine, criteo_rows, workers, tmp_path,
                                                                   monkeypatch):
    """widedeep's FP32 reference and fp8 run (with the probe) on 50 rows in batches of 8, streamed and read whole."""
    engine = workers if engine == "workers" else Engine()
    data = (None, criteo_rows)
    whole = _runs(engine, _cases(data, False, monkeypatch, "widedeep"), tmp_path / "whole", 8)
    streamed = _runs(engine, _cases(data, True, monkeypatch, "widedeep"), tmp_path / "streamed", 8)
    (_, expected), (inputs, outputs) = whole.reference("widedeep"), streamed.reference("widedeep")
    assert isinstance(inputs, CriteoSource)
    assert sorted(outputs) == sorted(expected) and all(np.array_equal(outputs[k], expected[k]) for k in expected)
    a, b = whole.hardware("widedeep", "fp8", probe=True), streamed.hardware("widedeep", "fp8", probe=True)
    assert all(np.array_equal(a["outputs"][k], b["outputs"][k]) for k in a["outputs"])
    assert a["local_errors"] == b["local_errors"] and a["details"] == b["details"]
    assert a["engine"]["batches"] == b["engine"]["batches"] >= 3


def _main_job(tmp_path: Path, name: str, ckpt: Path, folder: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "pytest", str(REPO / "conformance"), "-q", "-p", "no:cacheprovider", "-k",
            "test_accuracy", "--hardware", "ipu", "--profile", "smoke", "--model", "resnet50", "--precision",
            "fp16,fp8", "--checkpoint", f"resnet50={ckpt}", "--dataset", f"resnet50={folder}", "--diagnose",
            "--cache-dir", str(tmp_path / name / "cache"), "--report-dir", str(tmp_path / name / "report"), *options]


def _records(report: Path) -> dict:
    """The accuracy records of a report without the host's facts (timings, the engine's stats)."""
    records = json.loads((report / "results.json").read_text())["records"]
    return {r["id"]: {**{k: v for k, v in r.items() if k != "details"},
                      "details": {k: v for k, v in r["details"].items() if k not in HOST_FACTS}}
            for r in records if r["kind"] == "accuracy"}


def test_the_main_job_gives_the_same_records_streamed_and_read_whole(user_data, tmp_path, pytester, monkeypatch):
    """``--dataset`` of images: the records of the main job with the set streamed (serially, and on two workers) equal
    those of the set read whole (serially), diagnosis included."""
    ckpt, folder = user_data
    monkeypatch.setattr(datasets, "STREAMED_FORMATS", set())
    reads = []
    monkeypatch.setattr(ImageSource, "take", lambda self, start, stop, read=ImageSource.take:
                        reads.append((start, stop)) or read(self, start, stop))
    whole = pytester.runpytest(*_main_job(tmp_path, "whole", ckpt, folder)[3:])
    assert whole.ret == 0, whole.stdout.str()[-3000:]
    monkeypatch.undo()
    assert reads == [(0, 8)]  # read whole, once
    expected = _records(tmp_path / "whole" / "report")
    assert expected and all(r["details"]["judged"]["dataset"]["units"] == 8 for r in expected.values())
    for name, options in (("serial", ()), ("workers", ("--workers", "2"))):
        done = subprocess.run(_main_job(tmp_path, name, ckpt, folder, *options), cwd=REPO, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert _records(tmp_path / name / "report") == expected, name


# -- memory -----------------------------------------------------------------------------------------------------------
def _peak_bytes(run) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_set_larger_than_the_input_budget_streams_and_holds_about_one_batch(user_data, tmp_path, monkeypatch):
    """A set whose preprocessed pixels exceed the input budget is refused read whole and runs streamed; the memory a
    streamed FP32 run takes at its peak does not grow with the set (a set four times larger adds less than a batch)."""
    ckpt, _ = user_data
    small, large = _image_folder(tmp_path / "small", 2 * BATCH), _image_folder(tmp_path / "large", 8 * BATCH)
    model = load_cases(("resnet50",), {"resnet50": ckpt}, {}, {})["resnet50"].model
    streamed = {n: load_dataset("resnet50", f, model, checkpoint=ckpt, stream=True)
                for n, f in (("small", small), ("large", large))}
    row_bytes = streamed["large"].inputs.row_bytes
    monkeypatch.setattr(datasets_base, "MAX_INPUT_BYTES", 4 * BATCH * row_bytes)  # half the large set
    with pytest.raises(DatasetError, match=r"large/val_map.txt: 24 images need .* --samples resnet50=N"):
        load_dataset("resnet50", large, model, checkpoint=ckpt)
    cases = load_cases(("resnet50",), {"resnet50": ckpt}, {"resnet50": large}, {})
    assert cases["resnet50"].evaluation.streamed and cases["resnet50"].evaluation.rows == 8 * BATCH

    source = streamed["large"].inputs
    peaks = {n: _peak_bytes(lambda s=s: reference_on_engine(Engine(), "resnet50", model, s.inputs, BATCH))
             for n, s in streamed.items()}
    peaks["whole"] = _peak_bytes(lambda: reference_on_engine(Engine(), "resnet50", model,
                                                             take(source, 0, source.rows), BATCH))
    whole_large = source.rows * row_bytes
    # beside the model's own working memory (the same in the three runs), the streamed runs hold a batch of inputs,
    # the run of the inputs read whole holds all of them
    assert abs(peaks["large"] - peaks["small"]) < BATCH * row_bytes, (peaks, row_bytes)
    assert peaks["whole"] - peaks["large"] > whole_large - 2 * BATCH * row_bytes, (peaks, whole_large)
