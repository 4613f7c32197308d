"""Predict the time per batch and the throughput of a model on an IPU from its op trace (``ipu-conformance predict``).

Example: BERT-large at sequence length 128 in FP8 is ``ipu-conformance predict bert-base --batch-size 32 --precision fp8
--set num_hidden_layers=24 hidden_size=1024 num_attention_heads=16 intermediate_size=4096 seq_len=128 --no-packing``.
"""

from __future__ import annotations

import argparse
import json
import sys

from boundedio import GIB, ascii_integer
from conformance.hardware.ipu.timing.chips import DEFAULT_DEVICE, DEVICE_NAMES
from conformance.hardware.ipu.timing.cost import default_execution
from conformance.hardware.ipu.timing.predict import memory_estimate, predict
from models import MODEL_NAMES, canonical_name, host_bytes
from models.base import check_memory

MAX_BATCH = 1 << 24  # samples (or packs) per batch: far beyond any device batch, and an exact float
MAX_COUNT = 1 << 20  # clients, I/O tiles, batches per step
TRACE_BATCH = 4  # the largest batch the estimate traces on the host before it knows whether a batch fits


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set expects key=value (a field of the model's config), got {text!r}")
    return key.strip(), value.strip()


def _bounded_int(low: int, high: int):
    """argparse type: an integer in [low, high] (written in at most 20 characters)."""
    def parse(text: str) -> int:
        try:
            value = ascii_integer(text, -10 ** 20, 10 ** 20, signed=True)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}] written in digits 0-9, got "
                                             f"{text[:30]!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value
    return parse


_positive_int = _bounded_int(1, MAX_COUNT)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=f"model name ({', '.join(MODEL_NAMES)}, or an alias)")
    parser.add_argument("--batch-size", type=_bounded_int(1, MAX_BATCH), required=True,
                        help="samples per device batch (packs, for packed models)")
    parser.add_argument("--precision", required=True, help="fp16, fp16-half-partials, fp8, fp8-weights or fp32")
    parser.add_argument("--device", default=DEFAULT_DEVICE, type=str.lower,
                        help=f"IPU: {', '.join(DEVICE_NAMES)} (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", nargs="+", type=_key_value, action="extend", default=[], metavar="KEY=VALUE",
                        help="override fields of the model's config (see the README for each model's fields)")
    parser.add_argument("--io-tiles", type=_bounded_int(0, MAX_COUNT), default=None,
                        help="tiles reserved for overlapped host I/O (default: the seed benchmark's)")
    parser.add_argument("--batches-per-step", type=_positive_int, default=None,
                        help="device iterations per host step (default: the seed benchmark's)")
    packing = parser.add_mutually_exclusive_group()
    packing.add_argument("--packing", dest="packed", action="store_true", default=None, help="pack sequences (BERT-like models)")
    packing.add_argument("--no-packing", dest="packed", action="store_false", help="one padded sequence per row")
    parser.add_argument("--clients", type=_positive_int, default=None,
                        help="also show the seed benchmark's closed loop with this many clients (>= 1)")
    parser.add_argument("--allow-overflow", action="store_true",
                        help="print the estimate even when the batch does not fit in the device's SRAM (exit 0, not 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def check_config(name: str, overrides: dict) -> None:
    """The config ``overrides`` are fields of the model's config, each of its type and within its range, and the
    model they describe can be built and traced on this host: its parameters and the largest activation of a trace
    batch fit in the memory available. A ValueError naming the field, or the sizes, before anything is allocated."""
    shown = {key: value if len(value) <= 40 else value[:37] + "..." for key, value in overrides.items()}
    try:
        parameters, largest = host_bytes(name, TRACE_BATCH, **overrides)
    except TypeError as exc:  # an unknown field, listing the valid ones
        raise ValueError(f"{name}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{name}: config overrides {shown} rejected: {exc}") from None
    check_memory(parameters + largest, f"its parameters ({parameters / GIB:.3g} GiB) and the largest activation of a "
                 f"batch of {TRACE_BATCH} traced on this host ({largest / GIB:.3g} GiB)",
                 f"{name} with --set {' '.join(f'{k}={v}' for k, v in shown.items())}")


def run(args) -> int:
    name = canonical_name(args.model)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    given = [key for key, _ in args.overrides]
    twice = sorted({key for key in given if given.count(key) > 1})
    if twice:
        raise ValueError(f"--set gives {', '.join(twice)} more than once; give each field once")
    overrides = dict(args.overrides)
    check_config(name, overrides)
    try:
        return _run(args, name, overrides)
    except MemoryError:
        raise ValueError(f"{name}: the host ran out of memory tracing the model at these sizes (config {overrides}, "
                         f"batch {args.batch_size}); use smaller sizes") from None


def _run(args, name: str, overrides: dict) -> int:
    # The SRAM fit first, from small traces: an oversized batch is never allocated.
    fit = memory_estimate(name, args.batch_size, args.precision, args.device, overrides)
    if not fit.fits and not args.allow_overflow:
        print(f"ipu-conformance predict: {name} batch {args.batch_size} does not fit: needs {fit.total_bytes / 1e6:.1f} MB "
              f"(weights {fit.weight_bytes / 1e6:.1f} MB + peak activations {fit.activation_bytes / 1e6:.1f} MB), "
              f"capacity {fit.sram_bytes / 1e6:.0f} MB of SRAM on {args.device}; use a smaller --batch-size, or "
              "--allow-overflow for the estimate anyway", file=sys.stderr)
        return 1
    execution = default_execution(name, io_tiles=args.io_tiles, batches_per_step=args.batches_per_step, packed=args.packed,
                                  clients=args.clients)
    prediction = predict(name, args.batch_size, args.precision, args.device, overrides=overrides, execution=execution)
    closed = prediction.closed_loop(execution.clients)
    if args.json:
        out = prediction.to_json()
        out["closed_loop"] = {"clients": execution.clients, **closed}
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    data = prediction.to_json()
    b = data["breakdown_ms"]
    unit = " packs" if data["packed"] else ""
    print(f"{name} {args.precision} on {data['device']}, batch {args.batch_size}{unit}"
          + (f", config {overrides}" if overrides else ""))
    if data["packed"]:
        print(f"  packing: {data['sequences_per_pack']:.3f} sequences per pack -> {data['samples_per_batch']:.1f} sequences per batch")
    print(f"  device time per batch: {data['device_ms_per_batch']:.4f} ms (latency of a lone batch {data['latency_ms']:.4f} ms)")
    print(f"  throughput: {data['samples_per_second']:,.1f} samples/s ({data['achieved_tflops']:.1f} TFLOP/s achieved)")
    print(f"  breakdown: compute {b['compute']:.4f} ms, exchange {b['exchange']:.4f} ms, sync {b['sync']:.4f} ms, host {b['host']:.4f} ms")
    print(f"  execution: {data['io_tiles']} I/O tiles, {data['batches_per_step']} batches per step")
    print(f"  closed loop with {execution.clients} clients: {closed['qps']:,.1f} QPS, mean latency {closed['avg_latency_ms']:.3f} ms")
    print("  " + prediction.memory.message("SRAM"))
    if not prediction.memory.fits:
        print("  (estimate printed because of --allow-overflow: the batch does NOT fit in the device's SRAM)")
    return 0
