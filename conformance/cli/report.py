"""Render the compliance table again from one or more results.json files (``ipu-conformance report``).

Several files (the shards of one run, e.g. from ``pytest --shard i/n`` on n machines) are merged into one table; files
from different settings or commits, or overlapping ones, are refused. The exit status is the verdict: 0 PASS, 1 FAIL
(also for an incomplete set of shards); the command's own errors have other codes: 2 for unusable input (and bad
arguments), 3 when ``--out`` or ``--merged-json`` cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.fileio import write_text_atomic
from conformance.report import record as results_record
from conformance.report import render
from conformance.report.merge import MergeError, merge

EXIT_PASS, EXIT_FAIL, EXIT_UNUSABLE_INPUT, EXIT_CANNOT_WRITE = 0, 1, 2, 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS_JSON", help="results.json file(s) of a run")
    parser.add_argument("--format", choices=tuple(render.FORMATS), default="terminal",
                        help="output format: %(choices)s (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write to FILE (atomically) instead of standard output (default: standard output)")
    parser.add_argument("--merged-json", type=Path, default=None, metavar="FILE",
                        help="also write the merged results record to FILE (default: not written)")


def run(args) -> int:
    try:
        named = [(str(path), results_record.load(path)) for path in args.results]
        results = merge(named)
    except (results_record.ResultsError, MergeError) as exc:
        print(f"ipu-conformance report: error: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    text = render.FORMATS[args.format](results)
    for path, write in ((args.out, lambda p: write_text_atomic(p, text)),
                        (args.merged_json, lambda p: results_record.write(p, results))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            print(f"ipu-conformance report: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_CANNOT_WRITE
    if args.out is None:
        sys.stdout.write(text)
    return EXIT_PASS if results["verdict"] == "PASS" else EXIT_FAIL
