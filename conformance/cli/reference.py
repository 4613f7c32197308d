"""Generate or verify the FP32 reference outputs in reference/ (``ipu-conformance reference generate|verify``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.accuracy import reference
from conformance.datasets.cache import cached_seeded_weights
from models import MODEL_NAMES, canonical_name


def _models(value: str) -> list[str]:
    try:
        return [canonical_name(v.strip()) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("generate", "verify"), help="generate: compute and store; verify: check hashes")
    parser.add_argument("--model", action="append", type=_models, default=[], help="model(s), repeatable or comma list (default: all)")
    parser.add_argument("--dir", type=Path, default=reference.REFERENCE_DIR, help="reference directory (default: %(default)s)")
    parser.add_argument("--recompute", action="store_true", help="verify: also recompute the outputs in FP32 and compare")


def _say(line: str) -> None:
    print(line, flush=True)  # at once: a line says what starts, and building a model takes up to minutes


def run(args) -> int:
    with cached_seeded_weights():  # seeded weights built once per machine
        return _run(args)


def _run(args) -> int:
    names = [n for group in args.model for n in group] or list(MODEL_NAMES)
    if args.action == "generate":
        reference.generate(names, args.dir, log=_say)
        return 0
    problems = reference.verify(names, args.dir, recompute=args.recompute, log=_say)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0
