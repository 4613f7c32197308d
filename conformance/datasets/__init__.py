"""Users' evaluation data in the formats the field uses, read into each model's inputs with the reference
preprocessing, with labels to score against (see :mod:`conformance.datasets.base`).

| model | format | module |
|---|---|---|
| bert-base, albert | SQuAD v1.1 JSON (``dev-v1.1.json`` layout) + the checkpoint's tokenizer | ``squad`` |
| resnet50 | an image folder with ``val_map.txt`` (``<file> <label>`` per line) | ``images`` |
| widedeep | Criteo TSV: label, 13 integer and 26 categorical (hex) features | ``criteo`` |
| roformer | CAIL2019-SCM JSON lines (``A``, ``B``, ``C``, ``label``) + the checkpoint's tokenizer | ``cail`` |
| conformer | ``.npz`` of ``src`` and ``src_pad_mask`` (no labels) | ``speech`` |
"""

from __future__ import annotations

import importlib
from pathlib import Path

from conformance.datasets.base import DatasetError, EvaluationSet, SampleLabels, sha256_files
from models import model_specs

# The reader of each model's --dataset data, as its spec names it (:class:`models.spec.ModelSpec`); the built-in
# formats are shared on purpose where two models read one (SQuAD for bert-base and albert). Formats whose inputs can
# be streamed (read per batch) are those a spec marks so; SQuAD's are not: its task metrics read every window's ids.
FORMAT_MODULES = {name: spec.dataset_format for name, spec in model_specs().items() if spec.dataset_format}
STREAMED_FORMATS = {spec.dataset_format for spec in model_specs().values() if spec.dataset_format and spec.streamed_dataset}


def format_module(model_name: str):
    if model_name not in FORMAT_MODULES:
        raise DatasetError(f"{model_name}: no --dataset format is declared for this model; models that read one: "
                           f"{', '.join(FORMAT_MODULES)}")
    return importlib.import_module(FORMAT_MODULES[model_name])


def load_dataset(model_name: str, path, model, checkpoint=None, limit: int | None = None,
                 stream: bool = False) -> EvaluationSet:
    """The evaluation set of ``model_name`` read from ``path`` (a DatasetError naming what is wrong otherwise); with
    ``stream``, a format of :data:`STREAMED_FORMATS` gives its inputs as a source read per batch, the others read
    whole as without it."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{model_name} dataset {str(path)!r}: no such file or directory")
    if stream and FORMAT_MODULES.get(model_name) in STREAMED_FORMATS:
        return format_module(model_name).load(path, model, checkpoint=checkpoint, limit=limit, stream=True)
    return format_module(model_name).load(path, model, checkpoint=checkpoint, limit=limit)


def sample_labels(model_name: str, labels) -> SampleLabels | None:
    """``labels`` of the model's own samples (None: they have none) scored by its data format's ``label_scorer``;
    None where the format has no scorer of bare labels."""
    if labels is None or model_name not in FORMAT_MODULES:
        return None
    scorer = getattr(format_module(model_name), "label_scorer", None)
    return None if scorer is None else SampleLabels(model_name, labels, scorer(labels))


__all__ = ["DatasetError", "EvaluationSet", "SampleLabels", "sample_labels", "FORMAT_MODULES", "STREAMED_FORMATS", "format_module", "load_dataset",
           "sha256_files"]
