"""Predicted time per batch and throughput of a model on an IPU: trace the model, price the trace, check it fits in SRAM."""

from __future__ import annotations

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
from conformance.hardware.ipu.timing.trace import Trace, data_types, trace_model
from models import canonical_name, load_model

# Keys of Prediction.to_json(); the README documents them and a test checks them.
JSON_KEYS = ("model", "precision", "device", "config_overrides", "batch_size", "packed", "sequences_per_pack",
             "samples_per_batch", "device_ms_per_batch", "latency_ms", "samples_per_second", "breakdown_ms", "flops_per_batch",
             "achieved_tflops", "io_tiles", "batches_per_step", "sram", "parameters")


@lru_cache(maxsize=8)
def _model(name: str, overrides: tuple[tuple[str, object], ...]):
    return load_model(name, **dict(overrides))


def load_traced_model(name: str, overrides: dict | None = None):
    """The model ``name`` with config ``overrides`` (field names of its config dataclass), cached per process. An unknown
    model or field is a ValueError listing the valid ones."""
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
