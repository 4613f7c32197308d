"""Calibration of the timing model's few efficiencies against published results (``published.toml``).

The fit minimises the squared log ratio of predicted to published throughput over the rows marked ``fit = true``
(scipy least squares from a fixed grid of starting points, so it is deterministic). ``ipu-conformance calibrate`` refits
and prints the residual of every row; ``--write`` stores the parameters and the fit's per-row errors in
``calibration.toml``, which the timing model reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator
from scipy.optimize import least_squares

from conformance.datafiles import Schema, fail, read_toml, validate
from conformance.fileio import write_text_atomic
from conformance.hardware.ipu.policy import load_precisions
from conformance.hardware.ipu.timing.cost import (
    CALIBRATION_FILE,
    PARAMETER_NAMES,
    Parameters,
    TimingModel,
    default_execution,
)
from conformance.hardware.ipu.timing.predict import Prediction, predict
from models import MODEL_NAMES

PUBLISHED_FILE = Path(__file__).with_name("published.toml")
DEVICE = "c600"  # every published row is a C600

# Bounds of the fitted parameters (physical ranges: efficiencies are fractions of peak; overheads non-negative).
BOUNDS = {
    "amp_efficiency": (0.05, 1.0),
    "vector_efficiency": (0.02, 1.0),
    "superstep_overhead_cycles": (1.0, 50_000.0),
    "host_request_us": (1.0, 2_000.0),
}
STARTS = (
    Parameters(0.6, 0.5, 500.0, 50.0),
    Parameters(0.9, 0.2, 2000.0, 200.0),
    Parameters(0.4, 0.8, 5000.0, 20.0),
)


@dataclass(frozen=True)
class PublishedRow:
    model: str
    precision: str
    batch: int
    clients: int
    qps: float
    avg_ms: float
    p99_ms: float
    fit: bool = True
    packed: bool = False
    reason: str = ""
    set: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        unit = " packs" if self.packed else ""
        return f"{self.model} {self.precision} batch {self.batch}{unit}"


Positive = Annotated[int | float, Field(gt=0)]  # a published figure, kept as written (an integer stays one)


class PublishedRowSchema(Schema):
    model: Literal[MODEL_NAMES]
    precision: str
    batch: PositiveInt
    clients: PositiveInt
    qps: Positive
    avg_ms: Positive
    p99_ms: Positive
    fit: bool = True
    packed: bool = False
    reason: str = ""
    set: dict[str, Any] = {}

    @model_validator(mode="after")
    def _consistent(self):
        if self.p99_ms < self.avg_ms:
            raise ValueError(f"p99_ms {self.p99_ms:g} is below avg_ms {self.avg_ms:g}")
        if not self.fit and not self.reason.strip():
            raise ValueError("a row left out of the fit (fit = false) needs a reason")
        return self


class PublishedFile(Schema):
    row: list[PublishedRowSchema] = Field(min_length=1)


def load_rows(path: Path | None = None) -> list[PublishedRow]:
    """The published rows of ``path`` (default: published.toml), validated; a DataFileError (a ValueError) naming the
    file, line, row and key otherwise."""
    path = Path(path) if path is not None else PUBLISHED_FILE
    data, text = read_toml(path)
    rows = validate(data, PublishedFile, path, text).row
    precisions = load_precisions()[0]
    for index, row in enumerate(rows):
        if row.precision not in precisions:
            fail(path, ("row", index, "precision"), f"unknown precision {row.precision!r}; expected one of: "
                 f"{', '.join(precisions)}", text)
    return [PublishedRow(**row.model_dump()) for row in rows]


@dataclass
class RowResult:
    row: PublishedRow
    prediction: Prediction

    @property
    def predicted_qps(self) -> float:
        return self.prediction.samples_per_second

    @property
    def error(self) -> float:
        """Relative error of the predicted throughput: predicted / published - 1."""
        return self.predicted_qps / self.row.qps - 1.0

    @property
    def published_ms_per_batch(self) -> float:
        return self.prediction.samples_per_batch / self.row.qps * 1e3

    @property
    def predicted_avg_ms(self) -> float:
        return self.prediction.closed_loop(self.row.clients)["avg_latency_ms"]

    def as_dict(self) -> dict:
        return {"model": self.row.model, "precision": self.row.precision, "batch": self.row.batch,
                "fit": self.row.fit, "published_qps": self.row.qps, "predicted_qps": round(self.predicted_qps, 3),
                "published_ms_per_batch": round(self.published_ms_per_batch, 5),
                "predicted_ms_per_batch": round(self.prediction.time.per_batch_s * 1e3, 5),
                "published_avg_ms": self.row.avg_ms, "predicted_avg_ms": round(self.predicted_avg_ms, 4),
                "error": round(self.error, 5)}


def evaluate(rows: list[PublishedRow], params: Parameters) -> list[RowResult]:
    timing = TimingModel(DEVICE, params)
    results = []
    for row in rows:
        execution = default_execution(row.model, packed=row.packed, clients=row.clients)
        prediction = predict(row.model, row.batch, row.precision, DEVICE, overrides=row.set, execution=execution,
                             timing=timing)
        results.append(RowResult(row, prediction))
    return results


def _to_vector(params: Parameters) -> np.ndarray:
    return np.log([getattr(params, k) for k in PARAMETER_NAMES])


def _from_vector(x) -> Parameters:
    return Parameters(**{k: float(math.exp(v)) for k, v in zip(PARAMETER_NAMES, x)})


def fit(rows: list[PublishedRow] | None = None) -> tuple[Parameters, list[RowResult]]:
    """Least-squares fit of the parameters to the rows marked ``fit``; returns them and every row's result."""
    rows = load_rows() if rows is None else rows
    fitted = [r for r in rows if r.fit]
    if len(fitted) < len(PARAMETER_NAMES):
        raise ValueError(f"calibration needs at least {len(PARAMETER_NAMES)} rows marked fit, got {len(fitted)}")

    def residuals(x):
        return [math.log(r.predicted_qps / r.row.qps) for r in evaluate(fitted, _from_vector(x))]

    lower = np.log([BOUNDS[k][0] for k in PARAMETER_NAMES])
    upper = np.log([BOUNDS[k][1] for k in PARAMETER_NAMES])
    best = None
    for start in STARTS:
        result = least_squares(residuals, np.clip(_to_vector(start), lower, upper), bounds=(lower, upper),
                               x_scale=1.0, diff_step=1e-3, max_nfev=400)
        if best is None or result.cost < best.cost:
            best = result
    params = _from_vector(best.x)
    return params, evaluate(rows, params)


def summary(results: list[RowResult]) -> dict[str, float]:
    errors = [abs(r.error) for r in results if r.row.fit]
    logs = [math.log(r.predicted_qps / r.row.qps) for r in results if r.row.fit]
    return {"rows_fitted": len(errors), "max_abs_error": max(errors), "rms_log_error": float(np.sqrt(np.mean(np.square(logs))))}


def format_table(results: list[RowResult], params: Parameters) -> str:
    lines = ["parameters: " + ", ".join(f"{k} = {v:.4g}" for k, v in params.as_dict().items()),
             f"{'published row':<42} {'clients':>7} {'pub QPS':>12} {'pred QPS':>12} {'error':>8} "
             f"{'pub ms/batch':>12} {'pred ms/batch':>13} {'pub avg ms':>10} {'pred avg ms':>11}  fit"]
    for r in results:
        lines.append(f"{r.row.label:<42} {r.row.clients:>7} {r.row.qps:>12,.0f} {r.predicted_qps:>12,.0f} {r.error:>+8.1%} "
                     f"{r.published_ms_per_batch:>12.3f} {r.prediction.time.per_batch_s * 1e3:>13.3f} {r.row.avg_ms:>10.2f} "
                     f"{r.predicted_avg_ms:>11.2f}  {'yes' if r.row.fit else 'no: ' + r.row.reason.split(';')[0][:60] + '...'}")
    s = summary(results)
    lines.append(f"fitted rows: {s['rows_fitted']}, max |error| {s['max_abs_error']:.1%}, rms log error {s['rms_log_error']:.3f}")
    return "\n".join(lines)


def write_calibration(params: Parameters, results: list[RowResult], path: Path = CALIBRATION_FILE) -> None:
    s = summary(results)
    lines = ["# Fitted efficiencies of the IPU timing model, and the fit's error per published row.",
             "# Generated by `ipu-conformance calibrate --write` from published.toml; do not edit by hand.", "",
             "[parameters]"]
    lines += [f"{k} = {v!r}" for k, v in params.as_dict().items()]
    lines += ["", "[fit]", f"device = \"{DEVICE}\"", f"rows_fitted = {s['rows_fitted']}",
              f"max_abs_error = {s['max_abs_error']!r}", f"rms_log_error = {s['rms_log_error']!r}"]
    for r in results:
        lines.append("")
        lines.append("[[row]]")
        for k, v in r.as_dict().items():
            lines.append(f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v) if not isinstance(v, str) else chr(34) + v + chr(34)}")
    write_text_atomic(path, "\n".join(lines) + "\n")
