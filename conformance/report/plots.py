"""Pictures next to the report, per model and precision (matplotlib is an optional extra):

- the seed benchmark's three log-scale histograms of the outputs: the difference hardware - FP32, the FP32 result, and the
  hardware result (bins = min(values, 300); NaN and Inf counted as 0, as the seed benchmark does);
- the per-layer SNR profile from the accuracy records' ``details["layer_snr_db"]`` ([[layer, snr_db], ...]).

Inputs: ``<report_dir>/artifacts/<model>-<precision>.npz`` with ``reference__<output>`` and ``hardware__<output>`` arrays.
Outputs: ``<report_dir>/plots/<model>-<precision>-histograms.png`` and ``...-layer-snr.png``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from conformance.fileio import write_bytes_atomic

ARTIFACTS_DIR = "artifacts"
PLOTS_DIR = "plots"
MAX_BINS = 300
INSTALL_HINT = "matplotlib is not installed (pip install 'ipu-conformance[plots]')"


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def load_outputs(path) -> tuple[np.ndarray, np.ndarray]:
    """All outputs of an artifact file, flattened and concatenated in output-name order: (FP32, hardware)."""
    with np.load(path, allow_pickle=False) as data:
        names = sorted(k.split("__", 1)[1] for k in data.files if k.startswith("reference__"))
        missing = [n for n in names if f"hardware__{n}" not in data.files]
        if not names or missing:
            raise ValueError(f"{path}: expected reference__<output> and hardware__<output> pairs, found {sorted(data.files)}")
        reference = np.concatenate([np.asarray(data[f"reference__{n}"], np.float64).ravel() for n in names])
        hardware = np.concatenate([np.asarray(data[f"hardware__{n}"], np.float64).ravel() for n in names])
    if reference.shape != hardware.shape:
        raise ValueError(f"{path}: reference has {reference.size} values, hardware {hardware.size}")
    return reference, hardware


def _finite_or_zero(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), x, 0.0)


def _png(fig, canvas_cls) -> bytes:
    canvas_cls(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def histograms_png(key: str, reference: np.ndarray, hardware: np.ndarray, mpl) -> bytes:
    Figure, Canvas = mpl
    reference, hardware = _finite_or_zero(reference), _finite_or_zero(hardware)
    diff = hardware - reference
    bins = max(1, min(reference.size, MAX_BINS))
    fig = Figure(figsize=(15, 4.5))
    panels = ((diff, "difference (hardware - FP32)"), (reference, "FP32 result"), (hardware, "hardware result"))
    for index, (values, label) in enumerate(panels, start=1):
        ax = fig.add_subplot(1, 3, index)
        lo, hi = float(values.min()), float(values.max())
        ax.hist(values, bins=bins, range=(lo, hi) if hi > lo else None, alpha=0.7)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("count")
    fig.suptitle(f"{key}: {reference.size} output values; mean |diff| {np.mean(np.abs(diff)):.3g}, "
                 f"max |diff| {np.max(np.abs(diff)):.3g}")
    fig.tight_layout()
    return _png(fig, Canvas)


def layer_snr_png(key: str, profile: list, mpl) -> bytes:
    Figure, Canvas = mpl
    names = [str(layer) for layer, _ in profile]
    snr = [float("nan") if v is None else float(v) for _, v in profile]
    fig = Figure(figsize=(max(8.0, 0.12 * len(names)), 5))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(range(len(snr)), snr, marker=".", linewidth=1)
    step = max(1, len(names) // 40)
    ax.set_xticks(range(0, len(names), step))
    ax.set_xticklabels(names[::step], rotation=90, fontsize=6)
    ax.set_ylabel("SNR vs FP32 (dB)")
    ax.set_title(f"{key}: per-layer SNR")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _png(fig, Canvas)


def layer_profiles(records: list[dict]) -> dict[str, list]:
    """``model-precision`` -> its per-layer SNR profile, from the first record that carries one."""
    found = {}
    for r in records:
        profile = (r.get("details") or {}).get("layer_snr_db")
        if profile:
            found.setdefault(f"{r['model']}-{r['precision']}", profile)
    return found


def write_plots(report_dir, records: list[dict]) -> dict:
    """Draw every picture the run has data for; returns the ``plots`` section of results.json."""
    report_dir = Path(report_dir)
    artifacts = sorted((report_dir / ARTIFACTS_DIR).glob("*.npz")) if (report_dir / ARTIFACTS_DIR).is_dir() else []
    profiles = layer_profiles(records)
    if not artifacts and not profiles:
        return {"status": "none", "reason": "no accuracy artifacts or layer profiles in this run", "files": {}}
    mpl = _matplotlib()
    if mpl is None:
        return {"status": "skipped", "reason": INSTALL_HINT, "files": {}}
    files: dict[str, list[str]] = {}
    problems = []
    for path in artifacts:
        key = path.stem
        try:
            reference, hardware = load_outputs(path)
        except (ValueError, OSError) as exc:
            problems.append(str(exc))
            continue
        rel = f"{PLOTS_DIR}/{key}-histograms.png"
        write_bytes_atomic(report_dir / rel, histograms_png(key, reference, hardware, mpl))
        files.setdefault(key, []).append(rel)
    for key, profile in sorted(profiles.items()):
        rel = f"{PLOTS_DIR}/{key}-layer-snr.png"
        write_bytes_atomic(report_dir / rel, layer_snr_png(key, profile, mpl))
        files.setdefault(key, []).append(rel)
    return {"status": "written", "reason": "; ".join(problems), "files": {k: files[k] for k in sorted(files)}}
