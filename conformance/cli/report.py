"""Render the compliance table again from one or more results.json files, compare two runs, or check a file against
the published schema.

  ipu-conformance report RESULTS_JSON [...]       render (several files: the shards of one run, merged)
  ipu-conformance report compare OLD.json NEW.json  the checks that changed; exit 1 if a verdict got worse
  ipu-conformance report validate RESULTS_JSON      check against results.schema.json and against itself

Every file is checked before it is used: its verdicts must follow from its own records and tests
(:mod:`conformance.report.verify`); an inconsistent (edited) file is refused with exit 4, never rendered or compared.
Rendering: files that are not the shards of one run (different settings or commits, overlapping, or an incomplete
set of shards, also one shard alone) are refused with exit 4; otherwise the exit status is the verdict: 0 PASS, 1
FAIL, 5 NO VERDICT (nothing was judged). ``compare`` exits 1 when a verdict got worse, 0 otherwise, 4 when the files
have no gated check in common. The command's own errors have other codes: 2 for unusable input (a file that cannot
be read or is not a results file) and bad arguments, 3 when ``--out`` or ``--merged-json`` cannot be written;
``validate`` exits 0 for a valid file, 1 for one against the schema (naming the first bad field), 4 for one it cannot
read or that is inconsistent. (A results file named ``compare`` or ``validate`` is given as ``./compare``.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.fileio import write_text_atomic
from conformance.report import baseline, compare, render, verify
from conformance.report import record as results_record
from conformance.report.merge import MergeError, merge

EXIT_PASS, EXIT_FAIL, EXIT_UNUSABLE_INPUT, EXIT_CANNOT_WRITE, EXIT_USAGE = 0, 1, 2, 3, 4
EXIT_NO_VERDICT = results_record.EXIT_NO_VERDICT  # 5: nothing was judged
EXIT_BY_VERDICT = {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, results_record.NO_VERDICT: EXIT_NO_VERDICT}
VERBS = ("compare", "validate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULTS_JSON",
                        help="results.json file(s) of a run; or 'compare OLD NEW', or 'validate FILE'")
    parser.add_argument("--format", choices=tuple(dict.fromkeys([*render.FORMATS, *compare.FORMATS])), default="terminal",
                        help="output format: %(choices)s (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write to FILE (atomically) instead of standard output (default: standard output)")
    parser.add_argument("--merged-json", type=Path, default=None, metavar="FILE",
                        help="also write the merged results record to FILE (default: not written)")


def _error(message: str, code: int) -> int:
    print(f"ipu-conformance report: error: {message}", file=sys.stderr)
    return code


def validate(path: Path) -> int:
    """0 valid; 1 invalid, naming the first offending field; 4 when the file cannot be read or is inconsistent."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return _error(f"validate {path}: cannot read it ({reason})", EXIT_USAGE)
    try:
        data = results_record.validate(results_record.json.loads(text), source=str(path))
    except results_record.json.JSONDecodeError as exc:
        print(f"{path}: invalid: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
        return EXIT_FAIL
    except results_record.ResultsError as exc:
        print(f"invalid: {exc}")
        return EXIT_FAIL
    try:
        verify.check(data, str(path))
    except verify.InconsistentResults as exc:
        return _error(str(exc), EXIT_USAGE)
    print(f"{path}: valid {results_record.SCHEMA} results file (verdict {data['verdict']}, exit status "
          f"{data['exit_status']}, consistent with its records and tests)")
    return EXIT_PASS


def run_compare(args, old_path: Path, new_path: Path) -> int:
    if args.format not in compare.FORMATS or args.merged_json is not None:
        return _error(f"compare prints {', '.join(compare.FORMATS)} (--format) and merges nothing (--merged-json)",
                      EXIT_UNUSABLE_INPUT)
    try:
        old, new = verify.load(old_path), verify.load(new_path)
    except results_record.ResultsError as exc:
        return _error(str(exc), EXIT_UNUSABLE_INPUT)
    except verify.InconsistentResults as exc:
        return _error(str(exc), EXIT_USAGE)
    if not baseline.common(new["records"], old["records"]):
        return _error(f"compare {old_path} {new_path}: compares nothing: {new_path} has no gated check that {old_path} "
                      f"holds with a value ({len(old['records'])} and {len(new['records'])} record(s))", EXIT_USAGE)
    text = compare.FORMATS[args.format](old, new, str(old_path), str(new_path))
    code = _output(args, text, None)
    if code is not None:
        return code
    return EXIT_FAIL if compare.worsened(old, new) else EXIT_PASS


def _output(args, text: str, results: dict | None) -> int | None:
    """Write ``text`` to --out (or standard output) and the merged record to --merged-json; an exit code on failure."""
    for path, write in ((args.out, lambda p: write_text_atomic(p, text)),
                        (args.merged_json, lambda p: results_record.write(p, results))):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            return _error(f"cannot write {path}: {exc.strerror or exc}", EXIT_CANNOT_WRITE)
    if args.out is None:
        sys.stdout.write(text)
    return None


def run(args) -> int:
    verb, paths = (args.results[0], [Path(p) for p in args.results[1:]]) if args.results[0] in VERBS \
        else (None, [Path(p) for p in args.results])
    if verb == "validate":
        if len(paths) != 1:
            return _error(f"validate takes one results file, got {len(paths)}", EXIT_UNUSABLE_INPUT)
        return validate(paths[0])
    if verb == "compare":
        if len(paths) != 2:
            return _error(f"compare takes two results files (OLD NEW), got {len(paths)}", EXIT_UNUSABLE_INPUT)
        return run_compare(args, *paths)
    if args.format not in render.FORMATS:
        return _error(f"--format {args.format} is for compare; rendering takes {', '.join(render.FORMATS)}",
                      EXIT_UNUSABLE_INPUT)
    try:
        named = [(str(path), verify.load(path)) for path in paths]
        results = merge(named)
        if len(named) > 1:
            verify.check(results, "the merged record")
    except results_record.ResultsError as exc:
        return _error(str(exc), EXIT_UNUSABLE_INPUT)
    except (verify.InconsistentResults, MergeError) as exc:
        return _error(str(exc), EXIT_USAGE)
    text = render.FORMATS[args.format](results)
    code = _output(args, text, results)
    if code is not None:
        return code
    if results["verdict"] == results_record.NO_VERDICT:
        print(f"ipu-conformance report: {'; '.join(results_record.judgement_of(results).reasons)} (exit "
              f"{EXIT_NO_VERDICT})", file=sys.stderr)
    return EXIT_BY_VERDICT[results["verdict"]]
