"""Pictures next to the report, per model and precision (matplotlib is an optional extra):

- ``-histograms.png``: per output, three log-scale histograms: the difference hardware - FP32, the FP32 result and the
  hardware result (numpy's "auto" bins, at most :data:`MAX_BINS`; NaN and Inf counted as 0, as the seed benchmark
  does), each row titled with the output's SNR and the snr_db gate;
- ``-layer-snr.png``: the per-op SNR profile of the diagnosis (``details["layer_snr_db"]``, ``[[op, snr_db], ...]`` in
  execution order) in bands per block (encoder layer, ResNet stage ...), with the snr_db floor and the first jump;
- ``-latency.png``: per latency scenario, the latency at LoadGen's logged percentiles (min ... max; the run keeps no
  per-query latencies) read from the run's LoadGen log, with the gated percentile and its bound;
- ``-throughput.png``: for simulated timing, predicted samples/s against the device batch from the backend's timing
  model (:meth:`~conformance.hardware.base.Backend.predicted_throughput`), with the batch the runs use and the Offline
  run's figure.

Figures of simulated timing say "simulated" in their titles.

Inputs: ``<report_dir>/artifacts/<model>-<precision>.npz`` with ``reference__<output>`` and ``hardware__<output>`` arrays,
the records, and the LoadGen logs the performance records name (``details["log_dir"]``, relative to the report).
Outputs: ``<report_dir>/plots/<model>-<precision>-<kind>.png``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np

from conformance.fileio import write_bytes_atomic
from conformance.hardware import get_backend
from conformance.perf import loadgen_rules as rules
from conformance.perf.harness import read_detail_log
from conformance.perf.virtual import SUMMARY_FILE
from conformance.targets.performance import load_performance_targets

ARTIFACTS_DIR = "artifacts"
PLOTS_DIR = "plots"
MAX_BINS = 60
MAX_BLOCKS = 24  # more blocks than this: the profile is grouped one level up (wide&deep's 26 embedding tables)
LATENCY_SCENARIOS = ("SingleStream", "MultiStream", "Server")
NOT_ASKED = "--no-plots: the report was asked for without its figures"
INSTALL_HINT = "matplotlib is not installed (pip install 'ipu-conformance[plots]')"
LATENCY_NOTE = ("latency plots show LoadGen's logged percentiles (min, 50 ... 99.9, max): the run keeps no per-query "
                "latencies")


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def load_output_arrays(path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every output of an artifact file, by name: (FP32, hardware), flattened as float64."""
    with np.load(path, allow_pickle=False) as data:
        names = sorted(k.split("__", 1)[1] for k in data.files if k.startswith("reference__"))
        missing = [n for n in names if f"hardware__{n}" not in data.files]
        if not names or missing:
            raise ValueError(f"{path}: expected reference__<output> and hardware__<output> pairs, found {sorted(data.files)}")
        outputs = {n: (np.asarray(data[f"reference__{n}"], np.float64).ravel(),
                       np.asarray(data[f"hardware__{n}"], np.float64).ravel()) for n in names}
    for name, (reference, hardware) in outputs.items():
        if reference.shape != hardware.shape:
            raise ValueError(f"{path}: output {name!r}: reference has {reference.size} values, hardware {hardware.size}")
    return outputs


def load_outputs(path) -> tuple[np.ndarray, np.ndarray]:
    """All outputs of an artifact file, flattened and concatenated in output-name order: (FP32, hardware)."""
    outputs = load_output_arrays(path)
    return (np.concatenate([r for r, _ in outputs.values()]), np.concatenate([h for _, h in outputs.values()]))


def _finite_or_zero(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), x, 0.0)


def bin_edges(values: np.ndarray, max_bins: int = MAX_BINS) -> np.ndarray:
    """numpy's "auto" bins (the finer of Sturges and Freedman-Diaconis) over the values' range, at most ``max_bins``."""
    edges = np.histogram_bin_edges(values, bins="auto")
    if edges.size - 1 > max_bins:
        edges = np.histogram_bin_edges(values, bins=max_bins)
    return edges


def _plain_log_labels(axis) -> None:
    """Tick labels of a log axis as plain text (100, 1e+05) instead of matplotlib's mathtext powers of ten, whose
    parser costs about a fifth of drawing a histogram figure."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _png(fig, canvas_cls) -> bytes:
    canvas_cls(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _snr_gates(records: list[dict]) -> dict[str, dict]:
    """``model-precision`` -> its snr_db record (value, target, details["per_output"])."""
    found = {}
    for r in records:
        if r.get("kind") == "accuracy" and r.get("check") == "snr_db":
            found.setdefault(f"{r['model']}-{r['precision']}", r)
    return found


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}g}"


def histograms_png(key: str, outputs: dict[str, tuple[np.ndarray, np.ndarray]], mpl, snr_record: dict | None = None) -> bytes:
    """One row per output: difference, FP32 result, hardware result; log-scale counts."""
    Figure, Canvas = mpl
    per_output = ((snr_record or {}).get("details") or {}).get("per_output") or {}
    gate = ""
    if snr_record is not None and snr_record.get("target") is not None:
        gate = f"gate snr_db {snr_record.get('op', '>=')} {_fmt(snr_record['target'])} dB"
    fig = Figure(figsize=(15, 3.6 * len(outputs) + 0.6))
    for row, (name, (reference, hardware)) in enumerate(outputs.items()):
        nonfinite = int(np.sum(~np.isfinite(hardware)) + np.sum(~np.isfinite(reference)))
        reference, hardware = _finite_or_zero(reference), _finite_or_zero(hardware)
        diff = hardware - reference
        panels = ((diff, "difference (hardware - FP32)", "tab:red"), (reference, "FP32 result", "tab:blue"),
                  (hardware, "hardware result", "tab:green"))
        for col, (values, label, color) in enumerate(panels):
            ax = fig.add_subplot(len(outputs), 3, row * 3 + col + 1)
            edges = bin_edges(values)
            counts, _ = np.histogram(values, bins=edges)  # one filled outline, not a patch per bin: the same picture
            ax.stairs(counts, edges, fill=True, color=color, alpha=0.75)
            ax.set_yscale("log")
            _plain_log_labels(ax.yaxis)
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))  # -0.00075 labels overlapped
            ax.set_xlabel(f"{label} ({edges.size - 1} bins)")
            ax.set_ylabel("count")
            ax.grid(True, alpha=0.3)
        snr = per_output.get(name)
        if snr is None and len(outputs) == 1 and snr_record is not None:
            snr = snr_record.get("value")
        text = (f"{name}: {reference.size} values, SNR {_fmt(snr)} dB" + (f" ({gate})" if gate else "")
                + f"; mean |diff| {np.mean(np.abs(diff)):.3g}, max |diff| {np.max(np.abs(diff)):.3g}"
                + (f"; {nonfinite} non-finite counted as 0" if nonfinite else ""))
        fig.axes[row * 3 + 1].set_title(text, fontsize=11)
    fig.suptitle(f"{key}: hardware vs FP32 outputs", fontsize=13)
    _margins(fig, rows=len(outputs), cols=3)
    return _png(fig, Canvas)


def _margins(fig, rows: int, cols: int, left: float = 0.8, right: float = 0.2, top: float = 0.75, bottom: float = 0.55,
             between_rows: float = 1.05, between_cols: float = 0.75) -> None:
    """Fixed margins (inches) around a grid of panels, room for their tick labels, axis labels and titles: the same
    picture as ``tight_layout``, which measured every text of the figure first (a third of its drawing time). Used
    where the texts' sizes are known (numbers, the suite's own labels); the layer profile's block names are the
    model's, and keep ``tight_layout``."""
    width, height = fig.get_size_inches()
    axes_width = (width - left - right - between_cols * (cols - 1)) / cols
    axes_height = (height - top - bottom - between_rows * (rows - 1)) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=between_cols / axes_width, hspace=between_rows / axes_height)


# ----- the layer profile ----------------------------------------------------------------------------------------------
def _block_key(name: str, level: int) -> tuple[str, str]:
    """(key, label) of the block of an op. Level 0: the path up to its first number (``bert.encoder.layer.3``: "layer
    3"; ``resnet.encoder.stages.2``: "stages 2"); level 1: the path before it ("encoder.layer"). Names without a number
    group by their first two parts. A repeated application (``name#3``, a shared ALBERT layer) is a block of its own."""
    base, _, repeat = name.partition("#")
    parts = base.split(".")
    index = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    if index is None or (level == 1 and index == 0):
        key_parts = parts[:2]
    elif level == 0:
        key_parts = parts[:index + 1]
    else:
        key_parts = parts[:index]
    if key_parts and key_parts[-1].isdigit() and len(key_parts) >= 2:
        label = f"{key_parts[-2]} {key_parts[-1]}"
    else:
        label = key_parts[-1] if len(key_parts) == 1 or key_parts[0] not in ("bert", "albert", "roformer", "resnet") \
            else ".".join(key_parts[1:])
    key = ".".join(key_parts)
    if repeat:
        key, label = f"{key}#{repeat}", f"{label} #{repeat}"
    return key, label


def layer_blocks(names: list[str]) -> list[tuple[str, int, int]]:
    """Consecutive ops of the same block as (label, first index, last index + 1), at the finest grouping with at most
    :data:`MAX_BLOCKS` blocks."""
    for level in (0, 1):
        spans: list[list] = []
        for i, name in enumerate(names):
            key, label = _block_key(name, level)
            if spans and spans[-1][0] == key:
                spans[-1][3] = i + 1
            else:
                spans.append([key, label, i, i + 1])
        if len(spans) <= MAX_BLOCKS or level == 1:
            return [(label, start, stop) for _, label, start, stop in spans]
    raise AssertionError("unreachable")


def _short(name: str) -> str:
    """An op's name without its block's path: ``bert.encoder.layer.0.attention.self.query`` -> layer 0
    attention.self.query."""
    key, label = _block_key(name, 0)
    base = name.partition("#")[0]
    rest = base[len(key.partition("#")[0]):].lstrip(".")
    return f"{label}: {rest}" if rest else label


def layer_snr_png(key: str, profile: list, mpl, snr_record: dict | None = None, first_jump: str | None = None,
                  jump_db: float | None = None) -> bytes:
    Figure, Canvas = mpl
    names = [str(layer) for layer, _ in profile]
    snr = np.array([np.nan if v is None else float(v) for _, v in profile])
    x = np.arange(len(names))
    fig = Figure(figsize=(14, 6))
    ax = fig.add_subplot(1, 1, 1)
    blocks = layer_blocks(names)
    for i, (label, start, stop) in enumerate(blocks):
        if i % 2:
            ax.axvspan(start - 0.5, stop - 0.5, color="0.92", zorder=0)
    ax.plot(x, snr, marker=".", markersize=4, linewidth=1, color="tab:blue", label="SNR of the op's output vs FP32")
    finite = snr[np.isfinite(snr)]
    bottom = float(finite.min()) if finite.size else 0.0
    nonfinite = np.flatnonzero(~np.isfinite(snr))
    if nonfinite.size:
        ax.scatter(nonfinite, np.full(nonfinite.size, bottom - 3.0), marker="x", color="red", zorder=3,
                   label=f"non-finite output ({nonfinite.size} ops)")
    if snr_record is not None and snr_record.get("target") is not None:
        target = float(snr_record["target"])
        ax.axhline(target, color="tab:red", linestyle="--", linewidth=1.2,
                   label=f"gate: model output snr_db {snr_record.get('op', '>=')} {target:g} dB")
    if first_jump in names:
        j = names.index(first_jump)
        ax.axvline(j, color="tab:orange", linewidth=1.2, linestyle=":")
        y = snr[j] if np.isfinite(snr[j]) else bottom - 3.0
        ax.scatter([j], [y], s=80, facecolors="none", edgecolors="tab:orange", linewidths=2, zorder=4,
                   label=f"first jump: {_short(first_jump)}" + (f" (-{jump_db:.1f} dB)" if jump_db is not None else ""))
    centers = [(start + stop - 1) / 2 for _, start, stop in blocks]
    ax.set_xticks(centers)
    rotation = 0 if len(blocks) <= 10 else 45
    ax.set_xticklabels([label for label, _, _ in blocks], rotation=rotation, ha="center" if rotation == 0 else "right",
                       fontsize=9)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_xlabel(f"{len(names)} ops in execution order, by block")
    ax.set_ylabel("SNR vs FP32 (dB)")
    ax.set_title(f"{key}: SNR of each op's output vs FP32 (diagnosed samples)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    return _png(fig, Canvas)


def layer_profiles(records: list[dict]) -> dict[str, dict]:
    """``model-precision`` -> the details of the first record that carries its per-layer SNR profile."""
    found = {}
    for r in records:
        details = r.get("details") or {}
        if details.get("layer_snr_db"):
            found.setdefault(f"{r['model']}-{r['precision']}", details)
    return found


# ----- latency and throughput -----------------------------------------------------------------------------------------
def _is_simulated(record: dict) -> bool:
    return (record.get("details") or {}).get("timing") == "simulated"


def logged_latencies(report_dir: Path, record: dict) -> list[tuple[str, float]]:
    """(label, ms) at LoadGen's logged points (min, the percentiles, max) of the run behind ``record``, from its log
    directory: the simulation's summary on virtual time, LoadGen's detail log otherwise. Multistream's figures are per
    query. Empty when the log is not there."""
    log_dir = (record.get("details") or {}).get("log_dir")
    if not log_dir:
        return []
    path = Path(log_dir) if Path(log_dir).is_absolute() else report_dir / log_dir
    if (path / SUMMARY_FILE).is_file():
        values = json.loads((path / SUMMARY_FILE).read_text()).get("details") or {}
    elif (path / "mlperf_log_detail.txt").is_file():
        values = read_detail_log(path / "mlperf_log_detail.txt")
    else:
        return []
    per_query = "_per_query" if record.get("scenario") == "MultiStream" else ""
    points = [("min", values.get("result_min_latency_ns"))] if not per_query else []
    points += [(f"p{p * 100:g}", values.get(f"result_{rules.percentile_label(p)}_percentile{per_query}_latency_ns"))
               for p in rules.LOGGED_PERCENTILES]
    points += [("max", values.get("result_max_latency_ns"))] if not per_query else []
    return [(label, float(v) / 1e6) for label, v in points if isinstance(v, (int, float))]


def _latency_records(records: list[dict]) -> dict[str, dict[str, dict]]:
    """``model-precision`` -> scenario -> its gated latency record (units ms)."""
    found: dict[str, dict[str, dict]] = {}
    for r in records:
        if (r.get("kind") == "performance" and r.get("scenario") in LATENCY_SCENARIOS and r.get("units") == "ms"
                and r.get("gating", True)):
            found.setdefault(f"{r['model']}-{r['precision']}", {}).setdefault(r["scenario"], r)
    return found


def latency_png(key: str, scenarios: dict[str, tuple[dict, list]], mpl) -> bytes:
    """One panel per scenario: the latency at each logged point, the gated figure and its bound."""
    Figure, Canvas = mpl
    fig = Figure(figsize=(max(7.5, 5.2 * len(scenarios)), 4.8))
    simulated = any(_is_simulated(r) for r, _ in scenarios.values())
    for i, (scenario, (record, points)) in enumerate(scenarios.items()):
        ax = fig.add_subplot(1, len(scenarios), i + 1)
        labels = [label for label, _ in points]
        ax.plot(range(len(points)), [ms for _, ms in points], marker="o", color="tab:blue",
                label="latency at the percentile" + (" (per query)" if scenario == "MultiStream" else ""))
        ax.set_xticks(range(len(points)))
        ax.set_xticklabels(labels, fontsize=9)
        check = str(record.get("check", ""))
        value, target = record.get("value"), record.get("target")
        if target is not None:
            ax.axhline(float(target), color="tab:red", linestyle="--", label=f"bound {float(target):g} ms")
        if value is not None:
            match = re.match(r"p(\d+(?:\.\d+)?)_", check)
            at = f"p{float(match.group(1)):g}" if match else None
            xpos = labels.index(at) if at in labels else len(points) - 1
            ax.scatter([xpos], [float(value)], s=90, marker="D", color="tab:orange", zorder=3,
                       label=f"gated {check}: {float(value):.3g} ms")
        verdict = "PASS" if record.get("passed") else "FAIL"
        ax.set_title(f"{scenario}" + (" (simulated)" if _is_simulated(record) else "")
                     + f"\n{check} {_fmt(value)} ms, bound {_fmt(target)} ms: {verdict}", fontsize=10)
        ax.set_xlabel("LoadGen's logged percentile")
        ax.set_ylabel("latency (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"{key}: latency distribution per scenario{' (simulated)' if simulated else ''}; "
                 f"LoadGen's logged percentiles", fontsize=12)
    _margins(fig, rows=1, cols=len(scenarios), top=0.95, between_cols=0.9)  # two-line titles under the figure's
    return _png(fig, Canvas)


def _throughput_records(records: list[dict]) -> dict[str, dict]:
    """``model-precision`` -> a simulated performance record naming the timing model's chip (the Offline one first)."""
    found: dict[str, dict] = {}
    for r in records:
        details = r.get("details") or {}
        chip = (details.get("timing_model") or {}).get("chip")
        if r.get("kind") != "performance" or not _is_simulated(r) or chip is None:
            continue
        key = f"{r['model']}-{r['precision']}"
        if key not in found or (r.get("scenario") == "Offline" and found[key].get("scenario") != "Offline"):
            found[key] = r
    return found


def throughput_curve(model: str, precision: str, chip: str, hardware: str) -> dict:
    """Predicted samples/s per device batch of ``model`` from the device model of ``hardware`` on ``chip``
    (:meth:`~conformance.hardware.base.Backend.predicted_throughput`), at powers of two up to twice the batch the runs
    use (``max_batch`` in performance.toml), and that batch. A ValueError when the backend does not know ``chip`` or
    has no device model."""
    run = load_performance_targets().models[model]
    chosen = int(run.max_batch[hardware])
    batches = sorted({chosen, *[2 ** k for k in range((2 * chosen).bit_length()) if 2 ** k <= 2 * chosen]})
    predicted = get_backend(hardware, chip).predicted_throughput(model, precision, batches, int(run.rows_per_sample))
    if predicted is None:
        raise ValueError(f"hardware {hardware!r} has no device model to predict its throughput")
    return {"batches": batches, "samples_per_s": list(predicted["samples_per_s"]), "fits": list(predicted["fits"]),
            "chosen": chosen, "packed": bool(predicted["packed"]), "rows_per_sample": int(run.rows_per_sample)}


def throughput_png(key: str, curve: dict, chip: str, offline: float | None, mpl) -> bytes:
    Figure, Canvas = mpl
    fig = Figure(figsize=(9, 5.2))
    ax = fig.add_subplot(1, 1, 1)
    b, y, fits = np.array(curve["batches"]), np.array(curve["samples_per_s"]), np.array(curve["fits"])
    ax.plot(b, y, color="tab:blue", linewidth=1.2)
    ax.scatter(b[fits], y[fits], color="tab:blue", zorder=3, label="predicted (fits in SRAM)")
    if (~fits).any():
        ax.scatter(b[~fits], y[~fits], facecolors="none", edgecolors="tab:gray", zorder=3,
                   label="predicted, exceeds the SRAM")
    chosen = curve["chosen"]
    at = float(y[list(b).index(chosen)])
    ax.axvline(chosen, color="tab:orange", linestyle="--", linewidth=1)
    ax.scatter([chosen], [at], s=120, marker="*", color="tab:orange", zorder=4,
               label=f"batch of the runs: {chosen} ({at:,.0f} samples/s)")
    if offline is not None:
        ax.scatter([chosen], [offline], s=70, marker="D", color="tab:green", zorder=4,
                   label=f"Offline run: {offline:,.0f} samples/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(b)
    ax.set_xticklabels([str(v) for v in b], fontsize=9)
    unit = (f"{curve['rows_per_sample']} rows a sample" if curve["rows_per_sample"] > 1 else
            "one sequence a row; the runs pack sequences" if curve["packed"] else "")
    ax.set_xlabel("samples per device batch" + (f" ({unit})" if unit else ""))
    ax.set_ylabel("samples/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    ax.set_title(f"{key}: throughput vs batch on {chip} (simulated: timing model)")
    _margins(fig, rows=1, cols=1, left=0.85, top=0.45)
    return _png(fig, Canvas)


# ----- all of them ----------------------------------------------------------------------------------------------------
def write_plots(report_dir, records: list[dict], say=None) -> dict:
    """Draw every picture the run has data for, ``say(line)`` announcing it as it starts (a figure takes 0.1-0.3 s);
    returns the ``plots`` section of results.json (its ``reason`` holds the notes and the problems met)."""
    report_dir = Path(report_dir)
    artifacts = sorted((report_dir / ARTIFACTS_DIR).glob("*.npz")) if (report_dir / ARTIFACTS_DIR).is_dir() else []
    profiles = layer_profiles(records)
    latencies = _latency_records(records)
    throughputs = _throughput_records(records)
    if not artifacts and not profiles and not latencies and not throughputs:
        return {"status": "none", "reason": "no accuracy artifacts, layer profiles or performance records in this run",
                "files": {}}
    mpl = _matplotlib()
    if mpl is None:
        return {"status": "skipped", "reason": INSTALL_HINT, "files": {}}
    if say is not None:
        figures = len(artifacts) + len(profiles) + len(latencies) + len(throughputs)
        say(f"the report: drawing up to {figures} figure{'s' if figures != 1 else ''}")
    gates = _snr_gates(records)
    files: dict[str, list[str]] = {}
    notes: list[str] = []

    def write(key: str, kind: str, png: bytes) -> None:
        rel = f"{PLOTS_DIR}/{key}-{kind}.png"
        write_bytes_atomic(report_dir / rel, png)
        files.setdefault(key, []).append(rel)

    for path in artifacts:
        try:
            outputs = load_output_arrays(path)
        except (ValueError, OSError) as exc:
            notes.append(str(exc))
            continue
        write(path.stem, "histograms", histograms_png(path.stem, outputs, mpl, gates.get(path.stem)))
    for key, details in sorted(profiles.items()):
        write(key, "layer-snr", layer_snr_png(key, details["layer_snr_db"], mpl, gates.get(key), details.get("first_jump"),
                                              details.get("first_jump_drop_db")))
    drawn = False
    for key, by_scenario in sorted(latencies.items()):
        scenarios = {}
        for scenario in LATENCY_SCENARIOS:
            record = by_scenario.get(scenario)
            points = logged_latencies(report_dir, record) if record is not None else []
            if points:
                scenarios[scenario] = (record, points)
            elif record is not None:
                notes.append(f"{key} {scenario}: no LoadGen log with latency percentiles at "
                             f"{(record.get('details') or {}).get('log_dir') or '(no log directory)'}")
        if scenarios:
            write(key, "latency", latency_png(key, scenarios, mpl))
            drawn = True
    if drawn:
        notes.append(LATENCY_NOTE)
    for key, record in sorted(throughputs.items()):
        chip = record["details"]["timing_model"]["chip"]
        hardware = (record.get("details") or {}).get("hardware")
        if ((record.get("details") or {}).get("judged") or {}).get("checkpoint"):
            notes.append(f"{key}: no throughput curve (the timing model's curve is of the seeded model's sizes, not "
                         "of the user's checkpoint)")
            continue
        try:
            curve = throughput_curve(record["model"], record["precision"], chip, hardware)
        except (KeyError, ValueError) as exc:
            notes.append(f"{key}: no throughput curve from the timing model ({type(exc).__name__}: {exc})")
            continue
        offline = next((r.get("value") for r in records if r.get("kind") == "performance"
                        and f"{r['model']}-{r['precision']}" == key and r.get("scenario") == "Offline"
                        and r.get("units") == "samples/s" and r.get("gating", True)), None)
        write(key, "throughput", throughput_png(key, curve, chip, offline, mpl))
    return {"status": "written", "reason": "; ".join(notes), "files": {k: files[k] for k in sorted(files)}}
