"""Predicted time per batch and throughput of a model on an IPU: trace the model, price the trace, check it fits in SRAM."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

from conformance.hardware.ipu.timing.chips import DEFAULT_DEVICE, get_device
from conformance.hardware.ipu.timing.cost import (
    BatchTime,
    Execution,
    MemoryFit,
    Parameters,
    TimingModel,
    default_execution,
    memory_fit,
)
from conformance.hardware.ipu.timing.packing import PackingStats, packing_stats
from conformance.hardware.ipu.timing.trace import OpRecord, Trace, data_types, trace_model
import numpy as np

from models import canonical_name, model_module, model_spec

# Keys of Prediction.to_json(); the README documents them and a test checks them.
JSON_KEYS = ("model", "precision", "device", "config_overrides", "batch_size", "packed", "sequences_per_pack",
             "samples_per_batch", "device_ms_per_batch", "latency_ms", "samples_per_second", "breakdown_ms", "flops_per_batch",
             "achieved_tflops", "io_tiles", "batches_per_step", "sram", "parameters")


def shape_only_model(name: str, **overrides):
    """Model ``name`` with parameters of the right shapes and no values: zeros, which the allocator maps lazily and
    nothing reads (a trace records shapes, never values). Seeded weights cost tens of seconds (ResNet-50 fits its
    BatchNorm statistics by running the network); a timing estimate needs only the op list they produce."""
    module = model_module(name)
    config = module.build_config(**overrides)
    spec = model_spec(name)  # the class and the parameter shapes (its ``load`` does the same with real weights)
    params = {key: np.zeros(shape, np.float32) for key, shape in getattr(module, spec.param_shapes)(config).items()}
    return spec.model_class_for(module, config)(config, params)


@lru_cache(maxsize=8)
def _model(name: str, overrides: tuple[tuple[str, object], ...]):
    return shape_only_model(name, **dict(overrides))


def load_traced_model(name: str, overrides: dict | None = None):
    """The model ``name`` with config ``overrides`` (field names of its config dataclass) and shape-only parameters
    (:func:`shape_only_model`), cached per process. An unknown model or field is a ValueError listing the valid ones."""
    key = canonical_name(name)
    overrides = dict(overrides or {})
    try:
        return _model(key, tuple(sorted(overrides.items())))
    except TypeError as exc:  # models.base.apply_overrides: unknown field(s), listing the valid ones
        raise ValueError(f"{key}: {exc}") from None
    except ValueError as exc:  # a value that does not parse as the field's type, or a config the model rejects
        raise ValueError(f"{key}: config overrides {overrides} rejected: {exc}") from None


@lru_cache(maxsize=64)
def _trace(name: str, overrides: tuple, batch_size: int, precision: str) -> Trace:
    return trace_model(load_traced_model(name, dict(overrides)), batch_size, precision)


def model_trace(name: str, batch_size: int, precision: str, overrides: dict | None = None) -> Trace:
    data_types(precision)  # unknown precision: a clear error before loading anything
    return _trace(canonical_name(name), tuple(sorted((overrides or {}).items())), int(batch_size), precision)


# Traces at these batch sizes give every per-op quantity as an affine function of the batch (the third checks it).
# Batch 1 is not one of them: a batch of one broadcasts nothing that a larger batch does.
_PROBE_BATCHES = (2, 3, 4)
_NUMERIC_FIELDS = tuple(f.name for f in dataclasses.fields(OpRecord)
                        if f.type in ("float", "int"))


def _identity(op: OpRecord) -> tuple:
    """What must not change with the batch for a trace to be extrapolated."""
    return (op.op, op.name, op.kind, op.compute_type, op.sources, op.weight_operand, op.reduction, op.folded,
            len(op.out_shape))


def _affine(v1, v2, v3, batch: int):
    """``v`` at ``batch`` from its values at the three probe batches; None when they are not affine in the batch."""
    step = v2 - v1
    if abs((v3 - v2) - step) > 1e-9 * max(1.0, abs(v3)):
        return None
    value = v1 + step * (batch - _PROBE_BATCHES[0])
    return int(value) if isinstance(v1, int) and isinstance(v2, int) else float(value)


def extrapolated_trace(name: str, batch_size: int, precision: str, overrides: dict | None = None) -> Trace | None:
    """The trace at ``batch_size`` built from the (small, cached) traces at batches 2, 3 and 4, without running the model
    on ``batch_size`` samples, so nothing per-sample is allocated; None where the ops or their sizes are not affine in
    the batch (then only a real trace tells). Batches up to the largest probe are traced as they are."""
    if batch_size <= _PROBE_BATCHES[-1]:
        return model_trace(name, batch_size, precision, overrides)
    t1, t2, t3 = (model_trace(name, b, precision, overrides) for b in _PROBE_BATCHES)
    if not len(t1.ops) == len(t2.ops) == len(t3.ops):
        return None
    ops = []
    for a, b, c in zip(t1.ops, t2.ops, t3.ops):
        if not _identity(a) == _identity(b) == _identity(c):
            return None
        values = {}
        for field_name in _NUMERIC_FIELDS:
            value = _affine(getattr(a, field_name), getattr(b, field_name), getattr(c, field_name), batch_size)
            if value is None:
                return None
            values[field_name] = value
        shape = tuple(_affine(x, y, z, batch_size) for x, y, z in zip(a.out_shape, b.out_shape, c.out_shape))
        if any(s is None for s in shape):
            return None
        ops.append(dataclasses.replace(a, out_shape=shape, **values))
    totals = {}
    for field_name in ("input_bytes", "output_bytes", "weight_bytes"):
        value = _affine(getattr(t1, field_name), getattr(t2, field_name), getattr(t3, field_name), batch_size)
        if value is None:
            return None
        totals[field_name] = float(value)
    return Trace(model=t1.model, precision=precision, batch_size=int(batch_size), ops=ops, **totals)


def memory_estimate(model: str, batch_size: int, precision: str, device: str = DEFAULT_DEVICE,
                    overrides: dict | None = None) -> MemoryFit:
    """SRAM needed by a batch of ``batch_size`` against ``device``'s capacity, from small traces (no per-sample arrays
    are allocated, so it is safe to call before anything large)."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    name = canonical_name(model)
    dev = get_device(device)
    trace = extrapolated_trace(name, int(batch_size), precision, overrides)
    if trace is None:
        trace = model_trace(name, batch_size, precision, overrides)
    return memory_fit(trace, dev)


@dataclass
class Prediction:
    model: str
    precision: str
    device: str
    overrides: dict
    execution: Execution
    batch_size: int
    packing: PackingStats | None
    time: BatchTime
    memory: MemoryFit
    flops: float
    params: Parameters

    @property
    def samples_per_batch(self) -> float:
        """Samples (sequences, for packed models) one batch carries."""
        return self.batch_size * (self.packing.sequences_per_pack if self.packing else 1.0)

    @property
    def samples_per_second(self) -> float:
        return self.samples_per_batch / self.time.per_batch_s

    def closed_loop(self, clients: int) -> dict[str, float]:
        """The seed benchmark's closed loop in steady state (Little's law): the device serialises the calls, so QPS is
        samples per batch over time per batch and each call waits for the calls queued before it. Packed runs send one
        sequence per client call."""
        in_flight = clients if self.packing else clients * self.batch_size
        qps = self.samples_per_second
        return {"qps": qps, "avg_latency_ms": max(in_flight / qps, self.time.latency_s) * 1e3}

    def to_json(self) -> dict:
        t = self.time
        return {
            "model": self.model,
            "precision": self.precision,
            "device": self.device,
            "config_overrides": self.overrides,
            "batch_size": self.batch_size,
            "packed": self.packing is not None,
            "sequences_per_pack": self.packing.sequences_per_pack if self.packing else None,
            "samples_per_batch": self.samples_per_batch,
            "device_ms_per_batch": t.per_batch_s * 1e3,
            "latency_ms": t.latency_s * 1e3,
            "samples_per_second": self.samples_per_second,
            "breakdown_ms": {"compute": t.compute_s * 1e3, "exchange": t.exchange_s * 1e3, "sync": t.sync_s * 1e3,
                             "host": t.host_s * 1e3},
            "flops_per_batch": self.flops,
            "achieved_tflops": self.flops / t.per_batch_s / 1e12,
            "io_tiles": self.execution.io_tiles,
            "batches_per_step": self.execution.batches_per_step,
            "sram": {"weights_mb": self.memory.weight_bytes / 1e6, "activations_mb": self.memory.activation_bytes / 1e6,
                     "capacity_mb": self.memory.sram_bytes / 1e6, "fits": self.memory.fits},
            "parameters": self.params.as_dict(),
        }


def predict(model: str, batch_size: int, precision: str, device: str = DEFAULT_DEVICE, overrides: dict | None = None,
            execution: Execution | None = None, params: Parameters | None = None, timing: TimingModel | None = None) -> Prediction:
    """Time per batch of ``batch_size`` samples (packs, for packed models) of ``model`` at ``precision`` on ``device``."""
    name = canonical_name(model)
    dev = get_device(device)
    overrides = dict(overrides or {})
    execution = execution or default_execution(name)
    timing = timing or TimingModel(dev, params)
    trace = None
    if not memory_estimate(name, batch_size, precision, dev.name, overrides).fits:
        trace = extrapolated_trace(name, int(batch_size), precision, overrides)  # does not run the oversized batch
    if trace is None:
        trace = model_trace(name, batch_size, precision, overrides)
    packing = None
    if execution.packed:
        seq_len = getattr(load_traced_model(name, overrides).config, "seq_len", None)
        if seq_len is None:
            raise ValueError(f"{name}: packing needs a seq_len config field")
        packing = packing_stats(int(batch_size), int(seq_len))
    time = timing.batch_time(trace, execution)
    return Prediction(name, precision, dev.name, overrides, execution, int(batch_size), packing, time,
                      memory_fit(trace, dev), trace.flops, timing.params)
