"""Untrusted inputs: every file and option the suite is given means what it says, is read bounded, and never gives a
traceback. Each row puts one bad input to the real entry point (the main job in-process with ``--co``: every check
fires before any test; the ``ipu-conformance`` CLI, whose own usage errors exit 4; or the function that reads the
file) and asserts the exit code or error type, the words that name the input, and that nothing else was touched (the
files of the test's directory, the suite's references and data files, an empty cache). Bounds are tested with small
limits or crafted headers, never large allocations. Hypothesis properties mutate valid data files (SQuAD JSON, Criteo
TSV, val_map.txt): the readers raise their own error or accept, and accept only what is valid.

To add a row, append a :class:`Row` to ``ROWS``."""

from __future__ import annotations

import gzip
import hashlib
import importlib
import io
import json
import os
import re
import struct
import threading
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image
from safetensors.numpy import load_file, save_file

import conformance.datasets.base as dataset_base
import models.base
from conformance.accuracy import reference
from conformance.accuracy.evaluation import MetricSet, evaluate
from conformance.cli import main as cli_main
from conformance.datafiles import DataFileError, read_toml
from conformance.datasets import DatasetError
from conformance.datasets import criteo, images, speech, squad
from conformance.datasets.cache import OutputCache
from conformance.datasets.user import UserInputError, load_cases
from conformance.fileio import json_array
from conformance.hardware.ipu import policy
from conformance.hardware.ipu.timing import chips, cost
from conformance.targets import accuracy, audit, label_floors, performance, profiles
from models import MODEL_NAMES, CheckpointError, load_model, model_spec
from models.conformer import ConformerConfig
from models.resnet50 import ResNetConfig
from models.spec import ModelSpec
from models.widedeep import save_checkpoint

REPO = Path(__file__).resolve().parents[1]
SUITE = ["-q", "--hardware", "ipu", "--profile", "smoke", "--model", "widedeep", "--co"]
LOADERS = (performance.load_performance_targets, profiles.load_profiles, profiles.reference_samples,
           audit.load_audit_config, policy.load_precisions, chips.load_devices, cost.load_constants,
           cost.load_calibration, cost.calibration_hash, cost._execution_table, accuracy._load_targets,
           label_floors.load_label_floors)
WATCHED = (REPO / "reference", REPO / "conformance" / "targets")  # the suite's own files: never written by a refusal


# -- inputs -----------------------------------------------------------------------------------------------------------
def _widedeep(tmp: Path, hidden=(8,), buckets=(5,) * 26, name="ckpt", config=None) -> Path:
    """A small widedeep checkpoint (26 features, as Criteo data needs); ``config(dict)`` edits its config.json."""
    path = save_checkpoint(load_model("widedeep", seed=3, hidden_sizes=hidden, bucket_sizes=buckets, embedding_dim=2),
                           tmp / name)
    if config is not None:
        raw = json.loads((path / "config.json").read_text())
        written = config(raw)
        (path / "config.json").write_bytes(written if isinstance(written, bytes) else json.dumps(written).encode())
    return path


def _bert_two_layers_config_one(tmp: Path) -> Path:
    """A BERT QA checkpoint with two layers whose config.json says one."""
    sizes = dict(vocab_size=40, hidden_size=8, num_attention_heads=2, intermediate_size=12, max_position_embeddings=16,
                 type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12)
    model = load_model("bert-base", seed=1, num_hidden_layers=2, seq_len=16, **sizes)
    path = tmp / "bert"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 1, **sizes}))
    save_file({k: np.ascontiguousarray(v) for k, v in model.params.items()}, str(path / "model.safetensors"))
    return path


SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "The cat sat on the mat.", "qas": [
    {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]},
    {"id": "q2", "question": "Where?", "answers": [{"text": "the mat", "answer_start": 15}]}]}]}]}


def _squad(tmp: Path, text: str | None = None, start: int | None = None) -> Path:
    document = json.loads(json.dumps(SQUAD))
    answer = document["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]
    if text is not None:
        answer["text"] = text
    if start is not None:
        answer["answer_start"] = start
    path = tmp / "dev.json"
    path.write_text(json.dumps(document))
    return path


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` 8-bit grayscale pixels, with no pixel data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def _npy_header_only(shape, dtype=np.float32) -> bytes:
    """The bytes of an .npy whose header declares ``shape`` and that holds no data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                  "shape": tuple(shape)})
    return buffer.getvalue()


def _val_map(tmp: Path, line: str) -> Path:
    folder = tmp / "val"
    folder.mkdir(exist_ok=True)
    (folder / "val_map.txt").write_text(f"a.png 1\n{line}\n")
    return folder / "val_map.txt"


def _copy_references(tmp: Path, monkeypatch) -> Path:
    """A copy of reference/ that the suite reads instead (the suite's own files stay as they are)."""
    copy = tmp / "reference"
    copy.mkdir()
    for path in (REPO / "reference").iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(reference, "REFERENCE_DIR", copy)
    return copy


def _rehash(directory: Path, name: str, arrays: dict | None = None) -> None:
    """Update the manifest's hashes of ``name`` to its file as it now is (what a careless edit would do)."""
    manifest = json.loads((directory / "manifest.json").read_text())
    entry = manifest["models"][name]
    entry["file_sha256"] = hashlib.sha256((directory / f"{name}.npz").read_bytes()).hexdigest()
    if arrays is not None:
        entry["outputs_sha256"] = reference.sha256_arrays(arrays)
        entry["outputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()}
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _albert_as_widedeep(tmp: Path, monkeypatch) -> tuple[str, ...]:
    copy = _copy_references(tmp, monkeypatch)
    (copy / "widedeep.npz").write_bytes((copy / "albert.npz").read_bytes())
    with np.load(copy / "widedeep.npz") as data:
        outputs = {k: data[k] for k in data.files if not k.startswith("__")}
    _rehash(copy, "widedeep", outputs)
    return ()


def _fewer_rows(tmp: Path, monkeypatch) -> tuple[str, ...]:
    copy = _copy_references(tmp, monkeypatch)
    with np.load(copy / "widedeep.npz") as data:
        arrays = {k: data[k][:100] for k in data.files if k != reference.META}
    arrays[reference.META] = json_array({"format": reference.FORMAT, "model": "widedeep", "samples": 100})
    np.savez_compressed(copy / "widedeep.npz", **arrays)
    _rehash(copy, "widedeep", {k: v for k, v in arrays.items() if not k.startswith("__")})
    return ()


def _not_a_zip(tmp: Path, monkeypatch) -> tuple[str, ...]:
    copy = _copy_references(tmp, monkeypatch)
    (copy / "widedeep.npz").write_bytes(b"not a zip archive")
    _rehash(copy, "widedeep")
    return ()


def _manifest_without_file(tmp: Path, monkeypatch) -> tuple[str, ...]:
    copy = _copy_references(tmp, monkeypatch)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["models"]["widedeep"]["file"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return ()


def _edited_data_file(module: str, constant: str, old: str, new: str | bytes):
    """A setup that makes the suite read an edited copy of one of its data files (``old`` replaced by ``new``)."""
    def setup(tmp: Path, monkeypatch) -> tuple[str, ...]:
        original = getattr(importlib.import_module(module), constant)
        data = original.read_bytes()
        assert old.encode() in data, f"{old!r} is not in {original}"
        copy = tmp / "data" / original.name
        copy.parent.mkdir()
        copy.write_bytes(data.replace(old.encode(), new if isinstance(new, bytes) else new.encode(), 1))
        monkeypatch.setattr(importlib.import_module(module), constant, copy)
        return ()
    return setup


def _edited_model_table(model: str, kind: str, old: str, new: str):
    """A setup that makes the suite read an edited copy of one of a model's own tables (its spec's ``<kind>.toml``)."""
    def setup(tmp: Path, monkeypatch) -> tuple[str, ...]:
        table = ModelSpec.table
        original = table(model_spec(model), kind)
        text = original.read_text()
        assert old in text, f"{old!r} is not in {original}"
        copy = tmp / "tables" / model / original.name
        copy.parent.mkdir(parents=True)
        copy.write_text(text.replace(old, new, 1))
        monkeypatch.setattr(ModelSpec, "table", lambda self, k: copy if (self.name, k) == (model, kind) else table(self, k))
        return ()
    return setup


def _fifo(tmp: Path, name: str) -> Path:
    path = tmp / name
    os.mkfifo(path)
    return path


def _zip(path: Path, **members: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


# -- rows -------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One bad input. ``entry``: "suite" (the main job: ``SUITE`` + ``args``), "cli" (``ipu-conformance`` + ``args``)
    or "call" (``call(tmp)``, which must raise ``raises``). ``setup(tmp, monkeypatch)`` prepares files and patches
    (``{tmp}`` in an argument is the test's directory) and returns nothing or extra arguments. ``says``: words the
    message must hold (``{tmp}`` replaced too)."""

    id: str
    entry: str = "suite"
    args: tuple[str, ...] = ()
    setup: Callable | None = None
    call: Callable[[Path], object] | None = None
    code: int | None = 4  # the exit code of a "suite" or "cli" row
    raises: type[BaseException] | None = None  # the error a "call" row raises
    says: tuple[str, ...] = ()
    memory: float | None = None  # available memory (bytes) the row runs with: a small limit, not a large input


def _files(make: Callable[[Path], object]):
    def setup(tmp: Path, monkeypatch) -> tuple[str, ...]:
        make(tmp)
        return ()
    return setup


CKPT = ("--checkpoint", "widedeep={tmp}/ckpt", "--cache-dir", "{tmp}/cache")
PREDICT = ("predict", "bert-base", "--precision", "fp16", "--batch-size", "2")

ROWS = [
    # 1. inputs accepted that meant something else ------------------------------------------------------------------
    Row("checkpoint-extra-mlp-layer", args=CKPT,
        setup=_files(lambda tmp: _widedeep(tmp, hidden=(8, 8), config=lambda c: {**c, "hidden_sizes": [8]})),
        says=("--checkpoint widedeep=", "ckpt", "deep.mlp.1.weight", "does not use", "--allow-unused-weights")),
    Row("checkpoint-bert-two-layers-config-one", entry="call", raises=CheckpointError,
        setup=_files(_bert_two_layers_config_one),
        call=lambda tmp: load_model("bert-base", checkpoint=tmp / "bert", seq_len=16),
        says=("{tmp}/bert", "bert.encoder.layer.1.", "does not use")),
    Row("squad-answer-start-9999", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, start=9999)), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "question 'q2'", "answer 'the mat'", "answer_start 9999", "outside the context")),
    Row("squad-answer-start-negative", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, start=-5)), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "question 'q2'", "answer_start -5", "outside the context")),
    Row("squad-answer-empty", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, text="")), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "question 'q2'", "answer ''", "empty")),
    Row("squad-answer-text-elsewhere", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, start=4)), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "data[0].paragraphs[0].qas[1].answers[0]", "question 'q2'", "answer 'the mat'",
              "the context holds 'cat sat' there", "the text is at answer_start 15")),
    Row("squad-answer-text-not-in-context", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, text="the dog")), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "question 'q2'", "answer 'the dog' at answer_start 15", "the context holds 'the mat' there",
              "does not hold the text anywhere")),
    Row("squad-answer-text-recased", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _squad(tmp, text="The Mat")), call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "question 'q2'", "answer 'The Mat'", "the context holds 'the mat' there")),
    Row("image-float-pixels", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: Image.fromarray(np.ones((4, 4), np.float32)).save(tmp / "f.tiff")),
        call=lambda tmp: images.decode_image(tmp / "f.tiff"),
        says=("'f.tiff'", "F pixels", "no known scale")),
    Row("val-map-parent-path", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _val_map(tmp, "../secret.png 3")),
        call=lambda tmp: images.read_val_map(tmp / "val" / "val_map.txt", None),
        says=("val_map.txt:2", "'../secret.png'", "'..' part")),
    Row("val-map-absolute-path", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _val_map(tmp, "/etc/passwd 3")),
        call=lambda tmp: images.read_val_map(tmp / "val" / "val_map.txt", None),
        says=("val_map.txt:2", "'/etc/passwd'", "absolute path")),
    Row("val-map-symlink-out", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: (_val_map(tmp, "link/x.png 3"), os.symlink(tmp, tmp / "val" / "link"))),
        call=lambda tmp: images.load(tmp / "val", SimpleNamespace(name="resnet50", config=ResNetConfig())),
        says=("val_map.txt:2", "'link/x.png'", "leads out of the folder")),
    Row("predict-negative-layers", entry="cli", args=(*PREDICT, "--set", "num_hidden_layers=-3"), code=4,
        says=("num_hidden_layers = -3", "[1, 1024]")),
    Row("predict-hidden-size-million", entry="cli", args=(*PREDICT, "--set", "hidden_size=1000000"), code=4,
        says=("hidden_size = 1000000", "[1, 65536]")),
    Row("predict-parameters-beyond-memory", entry="cli", code=4, memory=1 << 30,
        args=(*PREDICT, "--set", "hidden_size=4096", "num_attention_heads=16", "intermediate_size=16384"),
        says=("bert-base with --set hidden_size=4096", "GiB", "memory available")),
    Row("predict-attention-beyond-memory", entry="cli", code=4,
        args=(*PREDICT, "--set", "seq_len=65536", "max_position_embeddings=65536"),
        says=("seq_len=65536", "largest activation", "memory available")),
    Row("checkpoint-bucket-size-float", args=CKPT,
        setup=_files(lambda tmp: _widedeep(
            tmp, config=lambda c: {**c, "bucket_sizes": [10.9, *c["bucket_sizes"][1:]]})),
        says=("--checkpoint widedeep=", "bucket_sizes[0] = 10.9", "expected an integer")),
    Row("checkpoint-size-negative", args=CKPT,
        setup=_files(lambda tmp: _widedeep(tmp, config=lambda c: {**c, "embedding_dim": -2})),
        says=("--checkpoint widedeep=", "embedding_dim = -2", "[1, 65536]")),
    Row("label-floor-above-one", setup=_edited_data_file("conformance.targets.label_floors", "FLOORS_FILE",
                                                        "squad_f1 = 0.05", "squad_f1 = 1.5"),
        says=("label_floors.toml:", "squad_f1 = 1.5", "less than 1")),
    Row("label-floor-missing", setup=_edited_data_file("conformance.targets.label_floors", "FLOORS_FILE",
                                                      "click_auc = 0.5", ""),
        says=("label_floors.toml", "lacks the required key 'click_auc'")),
    # 2. files believed, not checked ----------------------------------------------------------------------------------
    Row("reference-of-another-model", setup=_albert_as_widedeep,
        says=("widedeep.npz", "outputs of model 'albert', not 'widedeep'")),
    Row("reference-fewer-rows", setup=_fewer_rows,
        says=("widedeep.npz", "records 100 samples", "4096")),
    Row("reference-not-a-zip", setup=_not_a_zip, says=("widedeep.npz", "not a readable .npz archive")),
    Row("reference-manifest-key-missing", setup=_manifest_without_file,
        says=("manifest.json", "models.widedeep", "lacks the required key 'file'")),
    # 3. unbounded ----------------------------------------------------------------------------------------------------
    Row("dataset-fifo", args=(*CKPT, "--dataset", "widedeep={tmp}/rows.tsv"),
        setup=_files(lambda tmp: (_widedeep(tmp), _fifo(tmp, "rows.tsv"))), says=("rows.tsv", "FIFO")),
    Row("accuracy-toml-fifo", setup=lambda tmp, mp: mp.setattr(accuracy, "ACCURACY_FILE", _fifo(tmp, "accuracy.toml")),
        says=("accuracy.toml", "FIFO")),
    Row("criteo-gz-line-without-end", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: (tmp / "day.gz").write_bytes(gzip.compress(b"1" * (4 << 20), compresslevel=1))),
        call=lambda tmp: criteo.parse_rows(tmp / "day.gz", (97,) * 26, limit=1),
        says=("day.gz:1", "a line longer than 64.0 KiB")),
    Row("conformer-npz-header-claims-terabytes", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _zip(tmp / "x.npz", **{"src.npy": _npy_header_only((10**6, 3, 64, 512)),
                                                         "src_pad_mask.npy": _npy_header_only((10**6, 128), bool)})),
        call=lambda tmp: speech.read_arrays(tmp / "x.npz", ConformerConfig(), limit=None),
        says=("x.npz", "array 'src'", "more than")),
    Row("image-header-100000-squared", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: (tmp / "big.png").write_bytes(_png_header(100_000, 100_000))),
        call=lambda tmp: images.decode_image(tmp / "big.png"),
        says=("'big.png'", "100000")),
    Row("image-header-9000-squared", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: (tmp / "big.png").write_bytes(_png_header(9000, 9000))),
        call=lambda tmp: images.decode_image(tmp / "big.png"),
        says=("'big.png'", "header declares 9000 x 9000")),
    Row("image-strip-resized", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: Image.fromarray(np.zeros((4000, 1), np.uint8)).save(tmp / "strip.png")),
        call=lambda tmp: images.decode_image(tmp / "strip.png", images.mlperf_preprocessing(224)),
        says=("'strip.png'", "1 x 4000 pixels resize to 256 x 1024000")),
    Row("val-map-200000-lines", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: _val_map(tmp, "\n".join(["a.png 1"] * 199_999))),
        call=lambda tmp: images.load(tmp / "val", SimpleNamespace(name="resnet50", config=ResNetConfig())),
        says=("val_map.txt", "200,000 images", "--samples resnet50=N")),
    # 4. tracebacks ---------------------------------------------------------------------------------------------------
    Row("config-json-not-utf8", args=CKPT,
        setup=_files(lambda tmp: _widedeep(tmp, config=lambda c: json.dumps(c).encode()[:-1] + b', "x": "\xff"}')),
        says=("ckpt/config.json:1", "not UTF-8")),
    Row("config-json-5000-digits", args=CKPT,
        setup=_files(lambda tmp: _widedeep(tmp, config=lambda c: json.dumps(c).encode()[:-1] + b', "x": ' + b"1" * 5000
                                           + b"}")),
        says=("ckpt/config.json:1", "5000 characters")),
    Row("config-json-nested-100000", args=CKPT,
        setup=_files(lambda tmp: _widedeep(tmp, config=lambda c: b"[" * 100_000 + b"]" * 100_000)),
        says=("ckpt/config.json", "nested too deeply")),
    Row("accuracy-toml-not-utf8", setup=_edited_data_file("conformance.targets.accuracy", "ACCURACY_FILE",
                                                         "# Accuracy gates", b"# Accuracy \xff gates"),
        says=("accuracy.toml:1", "not UTF-8")),
    Row("performance-target-inf", setup=_edited_model_table("resnet50", "performance", "SingleStream = 1.4",
                                                           "SingleStream = inf"),
        says=("{tmp}/tables/resnet50/performance.toml:14", "SingleStream = inf", "not a finite number")),
    Row("chip-constant-inf", entry="cli", code=4,
        args=("predict", "resnet50", "--precision", "fp16", "--batch-size", "2"),
        setup=_edited_data_file("conformance.hardware.ipu.timing.chips", "DEVICES_FILE", "clock_ghz = 1.486",
                                "clock_ghz = inf"),
        says=("chips.toml", "c600.clock_ghz = inf", "not a finite number")),
    Row("chip-constant-vanishing", setup=_edited_data_file("conformance.hardware.ipu.timing.chips", "DEVICES_FILE",
                                                          "clock_ghz = 1.486", "clock_ghz = 1e-300"),
        args=("--device", "c600"), says=("chips.toml", "c600.clock_ghz = 1e-300", "nearer to zero")),
    Row("squad-json-nested-100000", entry="call", raises=DatasetError,
        setup=_files(lambda tmp: (tmp / "dev.json").write_text("[" * 100_000)),
        call=lambda tmp: squad.read_questions(tmp / "dev.json"),
        says=("dev.json", "nested too deeply")),
]


@pytest.fixture
def clean_loaders():
    for loader in LOADERS:
        loader.cache_clear()
    yield
    for loader in LOADERS:
        loader.cache_clear()


def _snapshot(*roots: Path) -> dict[str, str]:
    """Path -> SHA-256 of every file under ``roots`` (folders, FIFOs and links by their kind; links not followed)."""
    out = {}
    for root in roots:
        for top, folders, files in os.walk(root):
            for name in folders + files:
                path = Path(top) / name
                if path.is_symlink():
                    out[str(path)] = "link"
                elif path.is_dir():
                    out[str(path)] = "dir"
                elif not path.is_file():
                    out[str(path)] = "special"
                else:
                    out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class _Unblocker:
    """If a regression ever opens a FIFO of ``tmp`` for reading, this writes a line and closes it after a few seconds,
    so that the row fails instead of hanging."""

    def __init__(self, tmp: Path):
        self.done = threading.Event()
        self.tmp = tmp
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        if self.done.wait(10):
            return
        for top, _, files in os.walk(self.tmp):
            for name in files:
                fifo = Path(top) / name
                if not fifo.is_fifo():
                    continue
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    continue  # no reader: nothing blocks on it
                os.write(fd, b"x\n")
                os.close(fd)


def _run(row: Row, tmp: Path, request, capsys) -> tuple[object, str]:
    args = [a.replace("{tmp}", str(tmp)) for a in row.args]
    if row.entry == "suite":
        # pytester only here: it drops the modules a test imports when it ends, which extensions do not survive
        result = request.getfixturevalue("pytester").runpytest(str(REPO / "conformance"), *SUITE, *args)
        return int(result.ret), result.stderr.str() + result.stdout.str()
    if row.entry == "cli":
        try:
            code = cli_main(args)
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return code, captured.err + captured.out
    with pytest.raises(row.raises) as info:
        row.call(tmp)
    return None, str(info.value)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_untrusted_input_is_refused_naming_it(row, tmp_path, request, capsys, monkeypatch, clean_loaders):
    tmp = tmp_path / "in"
    tmp.mkdir()
    if row.memory is not None:
        monkeypatch.setattr(models.base, "available_memory", lambda: row.memory)
    if row.setup is not None:
        row.setup(tmp, monkeypatch)
    before, suite_before = _snapshot(tmp), _snapshot(*WATCHED)
    unblocker = _Unblocker(tmp)
    try:
        code, message = _run(row, tmp, request, capsys)
    finally:
        unblocker.done.set()
    expected = None if row.entry == "call" else row.code  # a call raises ``raises`` (checked by _run)
    assert code == expected, f"{row.id}: exit {code}, expected {expected}:\n{message}"
    missing = [word for word in (w.replace("{tmp}", str(tmp)) for w in row.says) if word not in message]
    assert not missing, f"{row.id}: the message lacks {missing}:\n{message}"
    assert "Traceback" not in message and "INTERNALERROR" not in message, message
    after = _snapshot(tmp)
    created = {p: h for p, h in after.items() if p not in before}
    assert all(p.startswith(str(tmp / "cache")) and h == "dir" for p, h in created.items()), \
        f"{row.id}: wrote {sorted(created)}"  # at most an empty cache directory (checked writable) appears
    assert {p: h for p, h in after.items() if p in before} == before, f"{row.id}: changed its inputs"
    assert _snapshot(*WATCHED) == suite_before, f"{row.id}: changed the suite's own files"


def test_every_finding_has_rows():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)) and len(ids) >= 30


# -- handled as described (not refused) -------------------------------------------------------------------------------
def test_unused_weights_allowed_by_the_option_are_listed(tmp_path, pytester, clean_loaders):
    """An extra MLP layer: refused, or with --allow-unused-weights judged without it and listed in what was judged."""
    _widedeep(tmp_path, hidden=(8, 8), config=lambda c: {**c, "hidden_sizes": [8]})
    with pytest.raises(UserInputError, match=r"2 tensor\(s\) that its config.json does not use: 'deep.mlp.1.bias', "
                                             r"'deep.mlp.1.weight'"):
        load_cases(("widedeep",), {"widedeep": tmp_path / "ckpt"}, {}, {})
    cases = load_cases(("widedeep",), {"widedeep": tmp_path / "ckpt"}, {}, {}, allow_unused_weights=True)
    judged = cases["widedeep"].judged()["checkpoint"]
    assert judged["unused_tensors"] == ["deep.mlp.1.bias", "deep.mlp.1.weight"]
    assert judged["config"]["hidden_sizes"] == [8]
    result = pytester.runpytest(str(REPO / "conformance"), *SUITE, "--checkpoint", f"widedeep={tmp_path / 'ckpt'}",
                                "--cache-dir", str(tmp_path / "cache"), "--allow-unused-weights")
    assert result.ret == 0, result.stdout.str()


def test_known_buffers_are_not_read_and_are_listed(tmp_path):
    """transformers' position_ids holding 0, 1, 2, ... and BatchNorm's step count leave the computation unchanged; a
    position_ids that holds anything else is an unused tensor like any other."""
    path = _widedeep(tmp_path)
    tensors = load_file(str(path / "model.safetensors"))
    save_file({**tensors, "embeddings.position_ids": np.arange(8)[None], "x.num_batches_tracked": np.array(5)},
              str(path / "model.safetensors"))
    model = load_model("widedeep", checkpoint=path)
    assert set(model.ignored_tensors) == {"embeddings.position_ids", "x.num_batches_tracked"}
    save_file({**tensors, "embeddings.position_ids": np.arange(8)[None] + 1}, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="'embeddings.position_ids'"):
        load_model("widedeep", checkpoint=path)


def test_a_16_bit_grayscale_png_is_scaled_not_clipped_to_white(tmp_path):
    values = np.array([[0, 257, 32896, 65535], [128, 129, 65278, 65279]], np.uint16)
    Image.fromarray(values).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    rgb = np.asarray(images.decode_image(tmp_path / "g16.png"))
    assert rgb.shape == (2, 4, 3) and (rgb == rgb[..., :1]).all()
    np.testing.assert_array_equal(rgb[..., 0], [[0, 1, 128, 255], [0, 1, 254, 254]])


def test_a_one_sample_run_decompresses_one_sample(tmp_path):
    """A conformer .npz of 64 utterances (25 MB once decompressed) read with --samples 1: one utterance is read."""
    config = ConformerConfig()
    src = np.zeros((64, config.in_channels, config.feature_bins, config.frames), np.float32)
    np.savez_compressed(tmp_path / "speech.npz", src=src, src_pad_mask=np.zeros((64, config.subsampled_frames), bool))
    del src
    tracemalloc.start()
    try:
        arrays = speech.read_arrays(tmp_path / "speech.npz", config, limit=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert arrays["src"].shape[0] == 1 and arrays["src_pad_mask"].shape[0] == 1
    assert peak < 4 << 20, f"peak {peak} bytes for one utterance of 393 KB"


def test_a_long_gz_line_is_refused_without_decompressing_it(tmp_path):
    """A 16 MiB line in a small .gz, read for one sample: refused after at most a line's limit is decompressed."""
    (tmp_path / "day.gz").write_bytes(gzip.compress(b"1" * (16 << 20), compresslevel=1))
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match=r"day.gz:1: a line longer than"):
            criteo.parse_rows(tmp_path / "day.gz", (97,) * 26, limit=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"peak {peak} bytes for a 16 MiB line"


def test_a_label_gate_on_an_fp32_score_of_zero_is_not_established():
    gates = [g for g in accuracy.gates_for("ipu", "bert-base", "fp16") if g.metric == "squad_f1" and g.gating]
    zero = MetricSet({"squad_f1": 0.0}, {}, {})
    [result] = evaluate(gates, zero, {"fp32": zero})
    assert result.passed and result.established is False and result.verdict == "PASS, not established"
    assert "floor 0.05 of label_floors.toml" in result.note and result.details["label_floor"]["fp32"] == 0.0
    good = MetricSet({"squad_f1": 0.8}, {}, {})
    [result] = evaluate(gates, good, {"fp32": good})
    assert result.verdict == "PASS" and not result.note
    [result] = evaluate(gates, MetricSet({"squad_f1": 0.0}, {}, {}), {"fp32": good})
    assert result.verdict == "FAIL"
    assert set(label_floors.load_label_floors()) == {m for ms in accuracy.LABEL_METRICS.values() for m in ms}


class _CountingCompute:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return {"probabilities": np.arange(6, dtype=np.float32).reshape(3, 2)}


def _stored(cache: OutputCache, key: str) -> Path:
    cache.get_or_compute("widedeep", key, _CountingCompute())
    return cache.path("widedeep", key)


DAMAGE = {
    "another-keys-entry": lambda cache, path: path.write_bytes(_stored(cache, "b" * 64).read_bytes()),
    "outputs-changed": lambda cache, path: np.savez(path, probabilities=np.zeros((3, 2), np.float32),
                                                    __entry__=dict(np.load(path))["__entry__"]),
    "truncated": lambda cache, path: path.write_bytes(path.read_bytes()[:-40]),
    "no-record": lambda cache, path: np.savez(path, probabilities=np.zeros((3, 2), np.float32)),
    "a-fifo": lambda cache, path: (path.unlink(), os.mkfifo(path)),
    "other-rows": lambda cache, path: None,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cache_entry_is_computed_again_and_replaced(damage, tmp_path):
    cache = OutputCache(tmp_path)
    path = _stored(cache, "a" * 64)
    DAMAGE[damage](cache, path)
    compute = _CountingCompute()
    rows = 4 if damage == "other-rows" else 3
    with pytest.warns(UserWarning, match="could not be used"):
        outputs, hit = cache.get_or_compute("widedeep", "a" * 64, compute, names=("probabilities",), rows=rows)
    assert not hit and compute.calls == 1 and str(path) in cache.replaced
    assert path.is_file() and not path.is_fifo()
    assert cache.read("widedeep", "a" * 64)["probabilities"].shape == (3, 2)
    leftovers = sorted(p.name for p in (tmp_path / "fp32").iterdir())
    assert all(name.endswith(".npz") for name in leftovers)  # no temporary files left


def test_the_stored_references_carry_their_samples():
    reference.check_files(MODEL_NAMES)
    with np.load(REPO / "reference" / "widedeep.npz") as data:
        assert data[reference.SAMPLE_HASHES].shape == (reference.evaluation_count("widedeep"), 32)
        assert json.loads(data[reference.META].tobytes())["model"] == "widedeep"


def test_fp32_beyond_the_stored_samples_is_computed_and_said(tmp_path, monkeypatch):
    class Tiny:
        name = "resnet50"
        output_names = ("logits",)
        config = SimpleNamespace()

        def sample_inputs(self, batch_size, seed=0):
            return {"pixel_values": np.arange(batch_size * 3, dtype=np.float32).reshape(batch_size, 3)}

        def __call__(self, inputs, ops=None):
            return {"logits": inputs["pixel_values"] * 2}

    monkeypatch.setattr(reference, "load_model", lambda name, seed=0, **kw: Tiny())
    monkeypatch.setattr(reference, "asdict", lambda config: {})
    reference.generate(["resnet50"], tmp_path, log=lambda *_: None)
    have = reference.evaluation_count("resnet50")
    inputs, outputs, source = reference.outputs_for(Tiny(), have + 5, 4, tmp_path)
    assert source == {"file": f"{tmp_path.name}/resnet50.npz", "stored_rows": have, "computed_rows": 5}
    np.testing.assert_array_equal(outputs["logits"], inputs["pixel_values"] * 2)


def test_suite_data_files_refuse_special_files(tmp_path):
    with pytest.raises(DataFileError, match="FIFO"):
        read_toml(_fifo(tmp_path, "x.toml"))


# -- properties: mutated data files -----------------------------------------------------------------------------------
PROPERTY = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**45, 10**45),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def _nodes(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _nodes(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _nodes(value, path + (index,))


def _all(node):
    """Every node of a JSON document."""
    yield node
    for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()):
        yield from _all(child)


def _numbers_fit(node) -> bool:
    """Every number as json.dumps writes it has at most 40 characters (the reader's bound)."""
    if isinstance(node, dict):
        return all(_numbers_fit(v) for v in node.values())
    if isinstance(node, list):
        return all(_numbers_fit(v) for v in node)
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return len(json.dumps(node)) <= 40
    return True


def _squad_valid(document) -> bool:
    """An independent statement of a valid SQuAD v1.1 document, as this suite reads it."""
    def obj(x, key, kind):
        return isinstance(x, dict) and key in x and isinstance(x[key], kind) and not isinstance(x[key], bool)
    if not _numbers_fit(document) or not obj(document, "data", list):
        return False
    ids = []
    for article in document["data"]:
        if not obj(article, "paragraphs", list):
            return False
        for paragraph in article["paragraphs"]:
            if not obj(paragraph, "context", str) or not obj(paragraph, "qas", list):
                return False
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                if not (obj(qa, "id", str) and obj(qa, "question", str) and obj(qa, "answers", list)):
                    return False
                if not qa["answers"]:
                    return False
                for answer in qa["answers"]:
                    if not obj(answer, "text", str) or not obj(answer, "answer_start", int):
                        return False
                    text, start = answer["text"], answer["answer_start"]
                    if not text.strip() or not 0 <= start <= len(context) - len(text):
                        return False
                    if context[start:start + len(text)] != text:
                        return False
                ids.append(qa["id"])
    return bool(ids) and len(ids) == len(set(ids))


@st.composite
def _mutated_squad(draw):
    document = json.loads(json.dumps(SQUAD))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_nodes(document))
        path = draw(st.sampled_from(paths))
        if not path:
            document = draw(JSON_VALUES)
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "number", "copy", "answer", "answer"]))
        if action == "answer":  # an answer moved or rewritten around the context's bounds
            answers = [node for node in _all(document)
                       if isinstance(node, dict) and "answer_start" in node and "text" in node]
            if answers:
                answer = draw(st.sampled_from(answers))
                answer["answer_start"] = draw(st.integers(-3, 30))
                answer["text"] = draw(st.sampled_from(["The cat", "mat.", "", " ", "the mat", "x" * 30, "cat sat"]))
        elif action == "delete":
            del parent[path[-1]]
        elif action == "number":
            parent[path[-1]] = draw(st.integers(-100, 100))
        elif action == "copy" and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[path[-1]])))
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return document


@PROPERTY
@given(document=_mutated_squad())
def test_mutated_squad_is_read_only_when_valid(document, tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(document))
    try:
        questions = squad.read_questions(path)
    except DatasetError:
        event("refused")
        assert not _squad_valid(document), f"refused a valid document: {json.dumps(document)[:300]}"
        return
    event("accepted")
    assert _squad_valid(document), f"accepted an invalid document: {json.dumps(document)[:300]}"
    assert len(questions) == sum(len(p["qas"]) for a in document["data"] for p in a["paragraphs"])


@PROPERTY
@given(edits=st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10**6),
                                st.binary(min_size=1, max_size=3)), min_size=1, max_size=4))
def test_squad_bytes_mutated_never_give_a_traceback(edits, tmp_path):
    data = bytearray(json.dumps(SQUAD).encode())
    for action, at, payload in edits:
        at %= len(data) + 1
        if action == "insert":
            data[at:at] = payload
        elif action == "delete":
            del data[at:at + len(payload)]
        elif at < len(data):
            data[at] = payload[0]
    path = tmp_path / "dev.json"
    path.write_bytes(bytes(data))
    try:
        squad.read_questions(path)
    except DatasetError:
        event("refused")
        return
    event("accepted")
    document = json.loads(bytes(data).decode("utf-8").removeprefix("\ufeff"))
    assert _squad_valid(document), f"accepted an invalid document: {bytes(data)[:300]!r}"


FIELD_BYTES = st.binary(max_size=6) | st.sampled_from([b"", b"-", b"+1", b"12", b"-3", b"1" * 19, b"0x1f", b"68fd1e64",
                                                       b"ABCdef", b"g1", b"1" * 18, b"\r", b" 1", b"\xff", b"0\t1",
                                                       b"0", b"7", b"-12", b"f" * 16, b"f" * 17, b"00aa"])


def _criteo_row_valid(line: bytes) -> bool:
    fields = line.split(b"\t")
    if len(fields) != 40 or fields[0] not in (b"0", b"1"):
        return False
    ints_ok = all(re.fullmatch(rb"-?[0-9]{1,18}", f) or f == b"" for f in fields[1:14])
    hex_ok = all(re.fullmatch(rb"[0-9a-fA-F]{1,16}", f) or f == b"" for f in fields[14:])
    return bool(ints_ok and hex_ok)


def _criteo_valid(data: bytes) -> bool:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return bool(lines) and all(_criteo_row_valid(line.rstrip(b"\r\n")) for line in lines)


@st.composite
def _mutated_criteo(draw):
    rows = [[b"1" if r % 2 else b"0"] + [str(r * 7 + i).encode() for i in range(13)]
            + [f"{r * 97 + i:08x}".encode() for i in range(26)] for r in range(3)]
    for _ in range(draw(st.integers(0, 2))):
        row = draw(st.sampled_from(rows))
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        at = draw(st.integers(0, len(row) - 1))
        if action == "replace":
            row[at] = draw(FIELD_BYTES)
        elif action == "drop":
            del row[at]
        else:
            row.insert(at, draw(FIELD_BYTES))
    ending = draw(st.sampled_from([b"\n", b"\r\n", b""]))
    return ending.join(b"\t".join(row) for row in rows) + draw(st.sampled_from([b"", b"\n", b"\n", b"\n\n"]))


@PROPERTY
@given(data=_mutated_criteo())
def test_mutated_criteo_is_read_only_when_valid(data, tmp_path):
    path = tmp_path / "rows.tsv"
    path.write_bytes(data)
    try:
        labels, numeric, ids = criteo.parse_rows(path, (97,) * 26)
    except DatasetError:
        event("refused")
        assert not _criteo_valid(data), f"refused valid rows: {data[:300]!r}"
        return
    event("accepted")
    assert _criteo_valid(data), f"accepted invalid rows: {data[:300]!r}"
    assert np.isfinite(numeric).all() and ((ids >= 0) & (ids < 97)).all() and set(np.unique(labels)) <= {0, 1}


NAME_PARTS = st.sampled_from(["a.png", "b", "..", ".", "", "/", "dir", "x y", "\\", "C:", "ok.jpg", "\u00e9.png"]
                             + ["a.png", "dir", "ok.jpg"] * 4)
LABEL_TEXT = st.sampled_from(["0", "7", "-1", "+3", "1" * 19, "1.5", "x", "", "0x2"] + ["0", "7", "999"] * 3)


def _val_map_valid(text: str, folder: Path) -> bool:
    entries = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not re.fullmatch(r"[+-]?[0-9]{1,18}", fields[1]):
            return False
        name = fields[0]
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
            return False
        if not (folder / name).resolve().is_relative_to(folder.resolve()):
            return False
        entries += 1
    return entries > 0


@st.composite
def _mutated_val_map(draw):
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        name = "/".join(draw(st.lists(NAME_PARTS, min_size=1, max_size=2)))
        separator = draw(st.sampled_from([" ", "\t", "  ", " \u3000 "]))
        lines.append(f"{name}{separator}{draw(LABEL_TEXT)}{draw(st.sampled_from(['', '', ' extra', ' ', chr(13)]))}")
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))


@PROPERTY
@given(text=_mutated_val_map())
def test_mutated_val_map_is_read_only_when_valid(text, tmp_path):
    folder = tmp_path / "val"
    folder.mkdir(exist_ok=True)
    path = folder / "val_map.txt"
    path.write_text(text, encoding="utf-8")
    try:
        entries = images.read_val_map(path, None)
    except DatasetError:
        event("refused")
        assert not _val_map_valid(text, folder), f"refused a valid val_map: {text!r}"
        return
    event("accepted")
    assert _val_map_valid(text, folder), f"accepted an invalid val_map: {text!r}"
    assert all((folder / name).resolve().is_relative_to(folder.resolve()) for _, name, _ in entries)


def test_readers_bound_their_inputs_with_small_limits(tmp_path, monkeypatch):
    """The limits are data of each reader: lowered here, a file just over them is refused naming the file and the
    limit, before it is read whole."""
    monkeypatch.setattr(dataset_base, "MAX_INPUT_BYTES", 1 << 10)
    config = ConformerConfig(frames=8, feature_bins=4, in_channels=1, hidden_size=4, num_attention_heads=1,
                             intermediate_size=4, num_hidden_layers=1)
    np.savez(tmp_path / "s.npz", src=np.zeros((9, 1, 4, 8), np.float32), src_pad_mask=np.zeros((9, 2), bool))
    with pytest.raises(DatasetError, match=r"s.npz: array 'src'.*more than"):
        speech.read_arrays(tmp_path / "s.npz", config)
    assert speech.read_arrays(tmp_path / "s.npz", config, limit=2)["src"].shape == (2, 1, 4, 8)
    monkeypatch.setattr(images, "MAX_LIST_BYTES", 16)
    (tmp_path / "val_map.txt").write_text("a.png 1\nb.png 2\nc.png 3\n")
    with pytest.raises(DatasetError, match=r"val_map.txt: 24 bytes, more than the 16 bytes"):
        images.read_val_map(tmp_path / "val_map.txt", None)
