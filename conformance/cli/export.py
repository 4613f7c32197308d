"""Write the ONNX graph of a model (``ipu-conformance export MODEL [--precision P] --out FILE.onnx``).

The graph is recorded from the suite's own numpy model, its forward run through recording ops, with the seeded
weights or a checkpoint's (``--checkpoint DIR``, read as the main job reads it). Opset 20; inputs and outputs are named
as the model's, with a dynamic batch axis; node names are the suite's layer names, so a precision policy's skip list
names the same nodes. Before the file is written (atomically), onnx.checker's full check passes and onnxruntime
reproduces the model on the sample the graph was recorded on.

``--precision`` one of the ``ipu`` hardware's precisions writes what its emulator computes: float16 values between
ops, and at FP8 QuantizeLinear/DequantizeLinear pairs (FLOAT8E4M3FNUZ = F143, FLOAT8E5M2FNUZ = F152) with the
calibrated power-of-two scales on exactly the operands the emulator quantizes (calibrated as the accuracy test
calibrates them). Beside it, ``FILE.poprt.json`` holds PopRT's converter settings for the same policy.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from conformance.cli import package_version
from conformance.datasets.cache import cached_seeded_weights
from conformance.datasets.user import load_checkpoint
from conformance.fileio import write_bytes_atomic
from conformance.hardware import get_backend
from conformance.hardware.ipu.policy import load_precisions
from models import MODEL_NAMES, canonical_name, load_model
from models.seeds import WEIGHT_SEED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=f"model name ({', '.join(MODEL_NAMES)}, or an alias)")
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="a checkpoint directory (config.json + model.safetensors, as the main job's --checkpoint); "
                             "default: the seeded weights")
    parser.add_argument("--allow-unused-weights", action="store_true",
                        help="export a --checkpoint whose model.safetensors holds tensors its config.json does not use")
    precisions = ("fp32", *load_precisions()[0])
    parser.add_argument("--precision", default="fp32", choices=precisions,
                        help=f"the graph's precision: fp32 (the reference) or a precision of the ipu hardware "
                             f"({', '.join(precisions[1:])}), with FILE.poprt.json beside it (default: fp32)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE.onnx", help="the ONNX file to write")


def run(args) -> int:
    with cached_seeded_weights():  # seeded weights built once per machine
        return _run(args)


def _run(args) -> int:
    # onnx is imported when a graph is exported, not when the command line is built: the other subcommands never load
    # it (its protobuf registry cannot be loaded twice into one process, as test harnesses that reset modules do)
    from conformance.graphs import OPSET, poprt, record, record_precision, save, writable_target

    name = canonical_name(args.model)
    out = writable_target(args.out)  # before the model is built: a bad --out fails at once
    start = time.perf_counter()
    if args.checkpoint is None:
        model = load_model(name, seed=WEIGHT_SEED)
        weights = f"seeded (seed {WEIGHT_SEED})"
    else:
        model, provenance = load_checkpoint(name, args.checkpoint, args.allow_unused_weights)
        weights = f"checkpoint {provenance['path']} (sha256 {provenance['sha256']})"
    loaded = time.perf_counter()
    settings = None
    if args.precision == "fp32":
        recording = record(model, weights=weights, version=package_version())
    else:
        prepared = get_backend("ipu").prepare(model, args.precision)  # FP8 scales calibrated as the accuracy test does
        recording, settings = record_precision(model, prepared.policy, prepared.plan, weights=weights,
                                               version=package_version())
    files = save(recording, out)
    if settings is not None:
        sidecar = out.with_suffix(".poprt.json")
        write_bytes_atomic(sidecar, poprt.dumps(settings))
        files.append(sidecar)
    done = time.perf_counter()
    graph = recording.model.graph
    inputs = ", ".join(i.name for i in graph.input)
    outputs = ", ".join(o.name for o in graph.output)
    print(f"wrote {', '.join(map(str, files))}: {name} {args.precision} ({weights}), opset {OPSET}, {len(graph.node)} nodes, "
          f"{model.num_parameters:,} parameters ({recording.weight_bytes / 1e6:.1f} MB); inputs {inputs}; outputs "
          f"{outputs}; batch axis dynamic. Model built in {loaded - start:.1f} s, graph recorded, checked and written "
          f"in {done - loaded:.1f} s")
    return 0
