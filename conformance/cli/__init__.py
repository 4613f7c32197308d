"""The ``ipu-conformance`` command. Each subcommand lives in its own module exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them together.

Exit status, as pytest's: a subcommand's verdict (0, or 1 for a failing one); the command's own errors are never 1:
4 for a usage error (bad arguments, argparse's own included, or unusable input: an error the subcommand raises,
ValueError or OSError), 3 for an internal error (a bug: any other exception, with its traceback) and where the
subcommand says so (``report``: its output cannot be written); 2 is left to an interrupted run. ``--help`` exits 0."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
import traceback

import conformance

EXIT_INTERNAL_ERROR = 3
EXIT_USAGE = 4  # bad arguments or unusable input (pytest's usage error)

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "reference": ("conformance.cli.reference", "generate or verify the FP32 reference outputs"),
    "predict": ("conformance.cli.predict", "predict time per batch and throughput on an IPU from the timing model"),
    "calibrate": ("conformance.cli.calibrate", "refit the IPU timing model to published results and print the residuals"),
    "report": ("conformance.cli.report", "render (and merge) results.json files, compare two runs, validate a file"),
    "sensitivity": ("conformance.cli.sensitivity", "inject numeric faults into the ipu emulator and show which accuracy "
                    "gates catch each"),
    "export": ("conformance.cli.export", "write the ONNX graph of a model, FP32 or at an ipu precision with PopRT's "
               "settings (seeded weights or a checkpoint)"),
}


def package_version() -> str:
    """The installed distribution's version; the package's own ``__version__`` where it is not installed."""
    try:
        return importlib.metadata.version("ipu-conformance")
    except importlib.metadata.PackageNotFoundError:
        return conformance.__version__


class UsageParser(argparse.ArgumentParser):
    """The command's parser and, as argparse makes them of their parent's class, its subcommands': an argument error
    (an unknown option included, named by the subcommand that was given it) is a usage error, exit 4."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser. ``only``: the subcommand that will run, the only module imported (each imports its own
    dependencies: models, numerics, LoadGen, scipy); the others are listed by their one-line help."""
    parser = UsageParser(
        prog="ipu-conformance", description="IPU conformance suite tools.",
        epilog="The conformance run itself is the pytest main job: pytest conformance/ --hardware ipu "
               "[--profile smoke|default|full|release] [--model NAME,...] [--report-dir DIR] (see pytest --help, group "
               "'IPU conformance suite'); its exit code is the verdict (the release verdict at --profile release).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip())
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # at once: without importing the subcommands (models, numerics, LoadGen)
        print(f"ipu-conformance {package_version()}")
        return 0
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ValueError, OSError) as exc:  # the command's own errors: never 1, which a failing verdict uses
        print(f"ipu-conformance {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 - a bug: the traceback, and the internal-error code pytest uses too
        traceback.print_exc()
        print(f"ipu-conformance {args.command}: internal error (the traceback above)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
