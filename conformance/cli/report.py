"""Render the compliance table again from one or more results.json files, compare two runs, or check a file against
the published schema.

  ipu-conformance report RESULTS_JSON [...]        render (several files: the shards of one run, merged)
  ipu-conformance report compare OLD.json NEW.json  what changed between two runs (--help: its own help)
  ipu-conformance report validate RESULTS_JSON      check a file against results.schema.json and itself

Every file is checked before it is used: its verdicts must follow from its own records and tests; an inconsistent
(edited) file is refused, never rendered or compared.

Exit status of rendering: the run's verdict, 0 PASS, 1 FAIL, 5 NO VERDICT (nothing was judged); 4 for files that
are not the shards of one run (different settings or commits, overlapping, an incomplete set, one shard alone), an
inconsistent file, one that cannot be read or is not a results file, and bad arguments; 3 when --out or
--merged-json cannot be written. (A results file named compare or validate is given as ./compare.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from boundedio import read_text
from conformance.fileio import write_text_atomic
from conformance.report import baseline, compare, render, verify
from conformance.report import record as results_record
from conformance.report.merge import MergeError, merge

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_WRITE, EXIT_USAGE = 0, 1, 3, 4
EXIT_NO_VERDICT = results_record.EXIT_NO_VERDICT  # 5: nothing was judged
EXIT_BY_VERDICT = {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, results_record.NO_VERDICT: EXIT_NO_VERDICT}

COMPARE_HELP = f"""\
What changed between two runs: every check whose value, target or verdict differs, with the delta, classified as

  better    its verdict improved (FAIL -> PASS, PASS* -> PASS)
  WORSE     its verdict got worse (PASS -> FAIL, PASS -> PASS*)
  settings  the runs differ in a setting of its figures that explains the change: a value that moved, or a
            gate between PASS and PASS* (its interval depends on the sample count); the settings compared:
            {', '.join(compare.FIGURE_SETTINGS)}
  changed   its value or target moved, its verdict did not
  added / removed   on one side only (other models, precisions or shards)

and what the run's verdict did (FAIL -> PASS is better). Settings in which the runs differ are named in a warning
before the table. Runs of two hardware targets are not compared.

Exit status: 1 when a gated check's verdict or the run's verdict got worse, 0 otherwise; 4 when the files cannot be
compared (other hardware, no gated check in common, inconsistent or unreadable) or for bad arguments; 3 when --out
cannot be written."""

VALIDATE_HELP = """\
Check one results.json against the published schema (results.schema.json), then against itself: its verdicts must
follow from its records and tests.

Exit status: 0 valid; 1 against the schema (naming the first offending field); 4 for a file that cannot be read, is
inconsistent (edited), or bad arguments."""


def _verb_parser(prog: str, verb: str) -> argparse.ArgumentParser:
    """The help of ``report compare`` and ``report validate``: their own arguments and text."""
    parser = argparse.ArgumentParser(prog=f"{prog} {verb}", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description=COMPARE_HELP if verb == "compare" else VALIDATE_HELP)
    if verb == "compare":
        parser.add_argument("old", metavar="OLD_JSON", help="results.json of the earlier run")
        parser.add_argument("new", metavar="NEW_JSON", help="results.json of the later run")
        parser.add_argument("--format", choices=tuple(compare.FORMATS), default="terminal",
                            help="output format: %(choices)s (default: %(default)s)")
        parser.add_argument("--out", metavar="FILE", help="write to FILE (atomically) instead of standard output")
    else:
        parser.add_argument("results", metavar="RESULTS_JSON", help="the results.json to check")
    return parser


VERBS = ("compare", "validate")


class _Help(argparse.Action):
    """``-h``: the help of the verb given before it (``report compare --help``), else of rendering."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, "results", None) or []
        verb = given[0] if given and given[0] in VERBS else None
        (_verb_parser(parser.prog, verb) if verb else parser).print_help()
        parser.exit()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the description's lists and paragraphs as written
    # the verb-aware -h below replaces the one argparse gave the subparser (resolved in its group of options)
    parser.conflict_handler = parser._optionals.conflict_handler = "resolve"
    parser.add_argument("-h", "--help", action=_Help,
                        help="show this help and exit; after compare or validate, the help of that command")
    parser.add_argument("results", nargs="+", metavar="RESULTS_JSON",
                        help="results.json file(s) of a run; or 'compare OLD NEW', or 'validate FILE'")
    parser.add_argument("--format", choices=tuple(dict.fromkeys([*render.FORMATS, *compare.FORMATS])), default="terminal",
                        help="output format: %(choices)s (default: %(default)s; compare: terminal, md, html)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write to FILE (atomically) instead of standard output (default: standard output)")
    parser.add_argument("--merged-json", type=Path, default=None, metavar="FILE",
                        help="also write the merged results record to FILE (default: not written)")


def _error(message: str, code: int) -> int:
    print(f"ipu-conformance report: error: {message}", file=sys.stderr)
    return code


def validate(path: Path) -> int:
    """0 valid; 1 invalid, naming the first offending field; 4 when the file cannot be read or is inconsistent."""
    try:  # bounded: a regular file of at most RESULTS_LIMIT bytes, UTF-8
        text = read_text(path, "a results.json", results_record.RESULTS_LIMIT, results_record.ResultsError)
    except results_record.ResultsError as exc:
        return _error(f"validate {path}: cannot read it ({str(exc).removeprefix(f'{path}: ')})", EXIT_USAGE)
    try:
        data = results_record.validate(results_record.parse(text, path), source=str(path))
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
                      EXIT_USAGE)
    try:
        old, new = verify.load(old_path), verify.load(new_path)
    except results_record.ResultsError as exc:
        return _error(str(exc), EXIT_USAGE)
    except verify.InconsistentResults as exc:
        return _error(str(exc), EXIT_USAGE)
    if not baseline.common(new["records"], old["records"]):
        return _error(f"compare {old_path} {new_path}: compares nothing: {new_path} has no gated check that {old_path} "
                      f"holds with a value ({len(old['records'])} and {len(new['records'])} record(s))", EXIT_USAGE)
    refused = compare.refusal(old, new)
    if refused:
        return _error(f"compare {old_path} {new_path}: {refused}", EXIT_USAGE)
    text = compare.FORMATS[args.format](old, new, str(old_path), str(new_path))
    if args.out is not None:  # the warnings reach the log even when the comparison goes to a file
        for line in compare.warnings_of(old, new):
            print(f"ipu-conformance report compare: {line}", file=sys.stderr)
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
            return _error(f"validate takes one results file, got {len(paths)}", EXIT_USAGE)
        return validate(paths[0])
    if verb == "compare":
        if len(paths) != 2:
            return _error(f"compare takes two results files (OLD NEW), got {len(paths)}", EXIT_USAGE)
        return run_compare(args, *paths)
    if args.format not in render.FORMATS:
        return _error(f"--format {args.format} is for compare; rendering takes {', '.join(render.FORMATS)}",
                      EXIT_USAGE)
    try:
        named = [(str(path), verify.load(path)) for path in paths]
        results = merge(named)
        if len(named) > 1:
            verify.check(results, "the merged record")
    except results_record.ResultsError as exc:
        return _error(str(exc), EXIT_USAGE)
    except (verify.InconsistentResults, MergeError) as exc:
        return _error(str(exc), EXIT_USAGE)
    renderer = render.FORMATS[args.format]
    # the page embeds the plots, found beside the (first) results file as its run wrote them
    text = renderer(results, plots_dir=paths[0].parent) if renderer is render.results_html else renderer(results)
    code = _output(args, text, results)
    if code is not None:
        return code
    if results["verdict"] == results_record.NO_VERDICT:
        print(f"ipu-conformance report: {'; '.join(results_record.judgement_of(results).reasons)} (exit "
              f"{EXIT_NO_VERDICT})", file=sys.stderr)
    return EXIT_BY_VERDICT[results["verdict"]]
