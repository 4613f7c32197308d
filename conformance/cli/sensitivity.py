"""Inject named numeric faults into the ipu emulator and show which accuracy gates catch each
(``ipu-conformance sensitivity``).

For every model and precision with accuracy gates, the correct emulator is run once (the baseline), then once per fault
that applies; a gate catches a fault when it passes without it and fails with it. Prints one table per model and
precision (fault -> the gates that caught it, NOT CAUGHT, not triggered, or n/a) and, with --report-dir, writes
sensitivity.json and sensitivity.md there. Exit status: 0 every fault that changed an output was caught, 1 some was
not, 2 interrupted or a model could not be run (its stored FP32 outputs are stale: listed, the others still run),
3 internal error or a report that cannot be written, 4 usage error (an unknown model, precision,
fault or profile, named with the valid choices)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conformance.accuracy import sensitivity
from conformance.cli import EXIT_USAGE
from conformance.datasets.cache import cached_seeded_weights
from conformance.fileio import write_text_atomic
from conformance.hardware import get_backend
from conformance.hardware.ipu.faults import FAULT_NAMES
from conformance.targets.profiles import PROFILE_NAMES
from models import MODEL_NAMES, canonical_name

EXIT_INTERRUPTED = 2
EXIT_UNUSABLE = 4  # a model could not be studied (its stored FP32 outputs are stale or missing): unusable data, no verdict
EXIT_REPORT_ERROR = 3


class UsageError(Exception):
    """A bad argument: exit 4 with the message."""


def _names(groups) -> list[str]:
    return [name.strip() for group in groups for name in group.split(",")]


def _choose(option: str, given: list[str], valid, canonical=lambda v: v) -> list[str] | None:
    """The names given to ``option`` (each once, in order), checked against ``valid``; None when none was given."""
    if not given:
        return None
    chosen = []
    for value in given:
        try:
            name = canonical(value)
        except ValueError:
            name = None
        if name not in valid:
            raise UsageError(f"{option} {value!r}: unknown; expected one of: {', '.join(valid)}")
        if name in chosen:
            raise UsageError(f"{option} {value!r}: given more than once")
        chosen.append(name)
    return chosen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", default=[], metavar="M[,M...]",
                        help=f"models, repeatable or a comma list: {', '.join(MODEL_NAMES)} (default: all)")
    parser.add_argument("--precision", action="append", default=[], metavar="P[,P...]",
                        help="ipu precisions, repeatable or a comma list (default: every precision with accuracy gates)")
    parser.add_argument("--fault", action="append", default=[], metavar="F[,F...]",
                        help=f"faults, repeatable or a comma list: {', '.join(FAULT_NAMES)} (default: all)")
    parser.add_argument("--profile", default="smoke", metavar="NAME",
                        help=f"sample counts and batch sizes of this profile: {', '.join(PROFILE_NAMES)} "
                             "(default: %(default)s)")
    parser.add_argument("--report-dir", type=Path, metavar="DIR",
                        help="write sensitivity.json and sensitivity.md into DIR (created; each file replaced whole)")


def _arguments(args) -> tuple[list[str], list[str] | None, list[str] | None]:
    models = _choose("--model", _names(args.model), MODEL_NAMES, canonical_name) or list(MODEL_NAMES)
    precisions = _choose("--precision", _names(args.precision), get_backend(sensitivity.HARDWARE).precisions)
    faults = _choose("--fault", _names(args.fault), FAULT_NAMES)
    if args.profile not in PROFILE_NAMES:
        raise UsageError(f"--profile {args.profile!r}: unknown; expected one of: {', '.join(PROFILE_NAMES)}")
    if not sensitivity.cases_for(models, precisions):
        raise UsageError(f"no accuracy gates for models {', '.join(models)} at precisions {', '.join(precisions or [])}"
                         " on the ipu")
    if args.report_dir is not None and args.report_dir.exists() and not args.report_dir.is_dir():
        raise UsageError(f"--report-dir {str(args.report_dir)!r} exists and is not a directory")
    return models, precisions, faults


def run(args) -> int:
    with cached_seeded_weights():  # seeded weights built once per machine
        return _run(args)


def _run(args) -> int:
    try:
        models, precisions, faults = _arguments(args)
    except UsageError as exc:
        print(f"ipu-conformance sensitivity: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = sensitivity.run(models, precisions, faults, args.profile,
                                 log=lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("ipu-conformance sensitivity: interrupted; nothing written", file=sys.stderr)
        return EXIT_INTERRUPTED
    sys.stdout.write(sensitivity.render_text(result))
    if args.report_dir is not None:
        try:
            write_text_atomic(args.report_dir / "sensitivity.json", json.dumps(result, indent=2) + "\n")
            write_text_atomic(args.report_dir / "sensitivity.md", sensitivity.render_markdown(result))
        except OSError as exc:
            print(f"ipu-conformance sensitivity: cannot write the report into {str(args.report_dir)!r}: {exc}",
                  file=sys.stderr)
            return EXIT_REPORT_ERROR
        print(f"report: {args.report_dir / 'sensitivity.json'}, {args.report_dir / 'sensitivity.md'}")
    if result["errors"]:
        return EXIT_UNUSABLE
    return 0 if result["all_caught"] else 1
