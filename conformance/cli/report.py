"""Render the compliance table again from one or more results.json files (``ipu-conformance report``).

Several files (the shards of one run, e.g. from ``pytest --shard i/n`` on n machines) are merged into one table; files
from different settings or commits, or overlapping ones, are refused. The exit status is the verdict: 0 PASS, 1 FAIL
(also for an incomplete set of shards), 2 for unusable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.fileio import write_text_atomic
from conformance.report import record as results_record
from conformance.report import render
from conformance.report.merge import MergeError, merge


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
        return 2
    text = render.FORMATS[args.format](results)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(args.out, text)
    if args.merged_json is not None:
        results_record.write(args.merged_json, results)
    return 0 if results["verdict"] == "PASS" else 1
