"""What a run judged, per model, from its records: the suite's seeded weights and synthetic samples, or a user's
checkpoint and evaluation data (``--checkpoint``, ``--dataset``, ``--calibration``), with hashes, sizes, label
coverage and whether the task figures are against labels or against FP32."""

from __future__ import annotations

PREPROCESSING_CHARS = 120
HEADERS = ("Model", "Checkpoint", "Evaluation data", "Task metrics against", "FP8 calibration")


def judged_by_model(results: dict) -> dict[str, dict]:
    """model -> the ``judged`` details of its accuracy records (the first one found; they are the same per model)."""
    out: dict[str, dict] = {}
    for record in results.get("records", []):
        judged = (record.get("details") or {}).get("judged")
        if judged and record.get("kind") == "accuracy" and record.get("model") not in out:
            out[record["model"]] = judged
    for record in results.get("records", []):  # a performance-only run still names the checkpoint it timed
        judged = (record.get("details") or {}).get("judged")
        if judged and record.get("model") not in out:
            out[record["model"]] = judged
    return out


def _checkpoint(info: dict | None) -> str:
    if not info or "seeded_weights" in info:
        return "seeded weights"
    config = info.get("config") or {}
    sizes = ", ".join(f"{k} {v}" for k, v in config.items() if k in (
        "num_hidden_layers", "hidden_size", "num_attention_heads", "depths", "hidden_sizes", "num_labels",
        "seq_len", "image_size", "embedding_dim"))
    dtypes = ", ".join(f"{n} {d}" for d, n in sorted((info.get("dtypes") or {}).items()))
    parameters = info.get("parameters")
    size = f"{parameters / 1e6:.1f}M parameters" if isinstance(parameters, (int, float)) else ""
    parts = [f"{info.get('path')} (sha256 {str(info.get('sha256'))[:12]})", size, sizes, f"tensors: {dtypes}" if dtypes else ""]
    return "; ".join(p for p in parts if p)


def _data(info) -> str:
    if not isinstance(info, dict):
        return str(info or "")
    if info.get("format") == "synthetic":
        return f"synthetic samples (seed {info.get('seed')})"
    preprocessing = info.get("preprocessing") or {}
    settings = ", ".join(f"{k} {v}" for k, v in preprocessing.items() if not isinstance(v, (dict, list)))
    if len(settings) > PREPROCESSING_CHARS:  # the whole of it is in results.json
        settings = settings[:PREPROCESSING_CHARS - 3].rstrip(", ") + "..."
    parts = [f"{info.get('format')} {info.get('path')} (sha256 {str(info.get('sha256'))[:12]})",
             f"{info.get('units')} units, {info.get('rows')} model samples", f"labels: {info.get('labels')}",
             f"preprocessing: {settings}" if settings else ""]
    return "; ".join(p for p in parts if p)


def judged_rows(results: dict) -> list[list[str]]:
    """One row per model the user gave a checkpoint or data for (none when the run judged only the suite's own)."""
    rows = []
    for model, judged in judged_by_model(results).items():
        rows.append([model, _checkpoint(judged.get("checkpoint")), _data(judged.get("dataset")) if "dataset" in judged
                     else "", judged.get("task_metrics_against", ""), _data(judged.get("fp8_calibration"))])
    return rows
