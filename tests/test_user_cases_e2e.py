"""Each of the six models judged end to end on a user's checkpoint and evaluation data: the main job at the smoke
profile with ``--checkpoint`` and ``--dataset`` (tiny transformers checkpoints saved with ``save_pretrained`` and data
files written here), its records against the labels, what it says was judged, and the FP32 accuracy it reports
against one computed independently from the transformers model (torch) on the same preprocessed inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import models.albert  # noqa: F401 - imported before the in-process runs, which drop modules they import
import models.bert  # noqa: F401
import models.conformer  # noqa: F401
import models.resnet50  # noqa: F401
import models.roformer  # noqa: F401
import models.widedeep  # noqa: F401
from conformance.datasets import load_dataset
from conformance.datasets.user import load_checkpoint
from models import load_model
from models.widedeep import save_checkpoint
from tests import test_dataset_cail as cail
from tests import test_dataset_criteo as criteo
from tests import test_dataset_images as images
from tests import test_dataset_squad as squad
from tests import test_models_conformer as conformer

REPO = Path(__file__).resolve().parents[1]


def _resnet50(root: Path) -> tuple[Path, Path]:
    ckpt = root / "resnet"
    torch.manual_seed(0)
    reference = transformers.ResNetForImageClassification(transformers.ResNetConfig(**images.TINY)).eval()
    images.randomize_(reference, 0)
    reference.save_pretrained(ckpt)
    folder = root / "val"
    folder.mkdir()
    rng = np.random.default_rng(1)
    lines = []
    for i in range(6):
        size = (int(rng.integers(230, 320)), int(rng.integers(230, 320)))
        images.write_image(folder / f"img{i}.jpg", size, "RGB", seed=i)
        lines.append(f"img{i}.jpg {int(rng.integers(0, images.TINY['num_labels']))}")
    (folder / "val_map.txt").write_text("\n".join(lines) + "\n")
    return ckpt, folder


def _widedeep(root: Path) -> tuple[Path, Path]:
    ckpt = root / "widedeep"
    save_checkpoint(load_model("widedeep", seed=5, hidden_sizes=(64, 32), bucket_sizes=(97,) * 26), ckpt)
    data = root / "rows.tsv"
    data.write_text("\n".join(criteo.criteo_lines(48, seed=3)) + "\n")
    return ckpt, data


def _conformer(root: Path) -> tuple[Path, Path]:
    model, subsampling = conformer.build_reference()
    ckpt = conformer.write_checkpoint(root / "conformer", model, subsampling)
    ours = load_model("conformer", checkpoint=ckpt)
    data = root / "speech.npz"
    np.savez(data, **ours.sample_inputs(4, seed=11))
    return ckpt, data


def _squad(root: Path, name: str) -> tuple[Path, Path]:
    paragraphs = squad._paragraphs()
    texts = [c for c, _ in paragraphs] + [q for _, qs in paragraphs for q in qs]
    tokenizer_file = squad._train_tokenizer(texts, root / f"{name}-tokenizer.json")
    vocab = json.loads(tokenizer_file.read_text())["model"]["vocab"]
    config_class, model_class = {"bert-base": (transformers.BertConfig, transformers.BertForQuestionAnswering),
                                 "albert": (transformers.AlbertConfig, transformers.AlbertForQuestionAnswering)}[name]
    extra = {"embedding_size": 16} if name == "albert" else {}
    torch.manual_seed(0)
    model = model_class(config_class(vocab_size=len(vocab), **squad.TINY, **extra)).eval()
    squad._randomize(model, 0)
    ckpt = root / name
    model.save_pretrained(ckpt)
    shutil.copy(tokenizer_file, ckpt / "tokenizer.json")
    data = root / f"{name}-dev.json"
    data.write_text(json.dumps(squad._squad_document(paragraphs)))
    return ckpt, data


def _roformer(root: Path) -> tuple[Path, Path]:
    triplets = cail._triplets()
    tokenizer_file = cail._train_tokenizer([e[k] for e in triplets for k in "ABC"], root / "roformer-tokenizer.json")
    vocab = json.loads(tokenizer_file.read_text())["model"]["vocab"]
    torch.manual_seed(0)
    model = transformers.RoFormerForSequenceClassification(
        transformers.RoFormerConfig(vocab_size=len(vocab), **cail.TINY)).eval()
    cail._randomize(model, 0)
    ckpt = root / "roformer"
    model.save_pretrained(ckpt)
    shutil.copy(tokenizer_file, ckpt / "tokenizer.json")
    return ckpt, cail._write_lines(root / "test.json", triplets)


BUILDERS = {"resnet50": _resnet50, "widedeep": _widedeep, "conformer": _conformer,
            "bert-base": lambda root: _squad(root, "bert-base"), "albert": lambda root: _squad(root, "albert"),
            "roformer": _roformer}
LABEL_METRICS = {"resnet50": "top1_accuracy", "widedeep": "click_auc", "bert-base": "squad_f1", "albert": "squad_f1",
                 "roformer": "pair_accuracy", "conformer": None}


def _independent_fp32(name: str, ckpt: Path, evaluation) -> float | None:
    """The FP32 label metric from the transformers model (torch) on the suite's preprocessed inputs, where one is
    simple to state here (the formats' own tests check the others against transformers' post-processing)."""
    if name == "resnet50":
        reference = transformers.ResNetForImageClassification.from_pretrained(ckpt).eval()
        with torch.no_grad():
            logits = reference(torch.from_numpy(evaluation.inputs["pixel_values"])).logits.numpy()
        labels = [int(line.split()[1]) for line in (Path(evaluation.provenance["path"]) / "val_map.txt").read_text().split("\n") if line]
        return float(np.mean(np.argmax(logits, axis=1) == np.array(labels)))
    if name == "roformer":
        reference = transformers.RoFormerForSequenceClassification.from_pretrained(ckpt).eval()
        with torch.no_grad():
            scores = reference(**{k: torch.from_numpy(v) for k, v in evaluation.inputs.items()}).logits.numpy()[:, 0]
        labels = [json.loads(line)["label"] for line in Path(evaluation.provenance["path"]).read_text().splitlines() if line]
        predicted = np.where(scores[0::2] > scores[1::2], "B", "C")
        return float(np.mean(predicted == np.array(labels)))
    return None


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_users_checkpoint_and_data_are_judged_against_labels(name, tmp_path, pytester):
    ckpt, data = BUILDERS[name](tmp_path)
    report = tmp_path / "report"
    result = pytester.runpytest(str(REPO / "conformance"), "-q", "-p", "no:randomly", "--hardware", "ipu",
                                "--profile", "smoke", "--model", name, "--precision", "fp16", "-k", "accuracy",
                                "--checkpoint", f"{name}={ckpt}", "--dataset", f"{name}={data}",
                                "--cache-dir", str(tmp_path / "cache"), "--report-dir", str(report))
    output = result.stdout.str()
    # A random checkpoint's answers can sit on near-ties that one FP16 rounding flips (among 10 SQuAD questions, one
    # flip fails the 99% gate), so the verdict is the model's, not the test's: the run must judge (exit 0 or 1, no
    # error), and a failure may only be an agreement gate of the model's decisions.
    assert result.ret in (0, 1), output[-3000:]
    results = json.loads((report / "results.json").read_text())
    assert results["exit_status"] == result.ret and all(t["outcome"] in ("passed", "failed") for t in results["tests"])
    failed = {r["check"].split("@")[0] for r in results["records"] if r["gating"] and r["passed"] is False}
    assert failed <= {"exact_match", "f1", "top1_agreement", "top5_agreement", "pairwise_order_agreement"}, output[-3000:]
    records = [r for r in results["records"] if r["kind"] == "accuracy" and r["model"] == name]
    judged = records[0]["details"]["judged"]
    _, provenance = load_checkpoint(name, ckpt)
    assert judged["checkpoint"]["sha256"] == provenance["sha256"]
    assert judged["dataset"]["path"] == str(data) and judged["dataset"]["sha256"]
    for page in ("compliance.md", "results.html"):
        text = (report / page).read_text()
        assert "What was judged" in text and provenance["sha256"][:12] in text and judged["dataset"]["sha256"][:12] in text
    metric = LABEL_METRICS[name]
    checks = {r["check"] for r in records}
    if metric is None:
        assert judged["task_metrics_against"] == "fp32"
        assert not any(c.split("@")[0] in ("top1_accuracy", "squad_f1") for c in checks)
        return
    assert judged["task_metrics_against"] == "labels and fp32"
    gate = next(r for r in records if r["check"] == f"{metric}@0.99xfp32")
    assert gate["gating"] and gate["details"]["ci95"] and gate["details"]["units"] == judged["dataset"]["units"]
    model, _ = load_checkpoint(name, ckpt)
    evaluation = load_dataset(name, data, model, checkpoint=ckpt)
    expected = _independent_fp32(name, ckpt, evaluation)
    if expected is not None:
        assert gate["details"]["fp32_value"] == pytest.approx(expected, abs=1e-12)
    # a second run reads the FP32 outputs from the cache
    again = pytester.runpytest(str(REPO / "conformance"), "-q", "-p", "no:randomly", "--hardware", "ipu",
                               "--profile", "smoke", "--model", name, "--precision", "fp16", "-k", "accuracy",
                               "--checkpoint", f"{name}={ckpt}", "--dataset", f"{name}={data}",
                               "--cache-dir", str(tmp_path / "cache"), "--report-dir", str(tmp_path / "report2"))
    assert again.ret == result.ret  # the same verdict from the cached FP32 outputs
    second = json.loads((tmp_path / "report2" / "results.json").read_text())
    cached = next(r for r in second["records"] if r["kind"] == "accuracy")["details"]["judged"]["fp32_outputs_cached"]
    assert cached is True

