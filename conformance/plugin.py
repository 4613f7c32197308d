"""pytest plugin of the conformance suite: command-line options and hooks only; the logic lives in plain modules."""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import replace
from pathlib import Path

import numpy
import pytest

from conformance.accuracy import reference
from conformance.datasets.cache import CacheError, check_writable, default_directory
from conformance.datasets.user import UserCase, UserInputError, load_cases
from conformance.hardware import get_backend, hardware_names
from conformance.numerics.compiled import KERNEL_PATHS, KERNELS_VARIABLE, configured_path
from conformance.numerics.formats import worker_threads
from conformance.perf.interrupts import terminate_as_interrupt
from conformance.report import xfails
from conformance.report.session import ReportSession
from conformance.report.shard import parse_shard
from conformance.settings import RunSettings
from conformance.targets import DataFileError
from conformance.targets import accuracy as accuracy_targets
from conformance.targets.audit import load_audit_config
from conformance.targets.label_floors import load_label_floors
from conformance.targets.performance import PERFORMANCE_FILE, load_performance_targets
from conformance.targets.profiles import PROFILE_NAMES, load_profiles
from conformance.targets.regression import load_tolerances
from models import MODEL_NAMES, canonical_name

SETTINGS_KEY = pytest.StashKey[RunSettings]()
USER_CASES_KEY = pytest.StashKey[dict[str, UserCase]]()
REPORT_KEY = pytest.StashKey[ReportSession]()
THREADS_VARIABLE = "CONFORMANCE_THREADS"
# cases beside the six models, run when --model is not given or names them
EXTRA_CASES = ("minilm",)
EXTRA_CASE_MODULES = {"test_minilm.py": "minilm"}


def _model_names(value: str) -> list[str]:
    """argparse type of ``--model``: one name or a comma list, each a known model or alias, none empty or repeated."""
    names: dict[str, str] = {}  # canonical name -> how it was written
    for part in value.split(","):
        part = part.strip()
        if not part:
            raise argparse.ArgumentTypeError(
                f"{value!r} has an empty model name; expected NAME[,NAME...] with each NAME one of: "
                f"{', '.join(MODEL_NAMES)}")
        try:
            name = part.lower() if part.lower() in EXTRA_CASES else canonical_name(part)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}; or {', '.join(EXTRA_CASES)} (the trained checkpoint case)") from None
        if name in names:
            raise argparse.ArgumentTypeError(f"{value!r} names model {name!r} twice ({names[name]!r} and {part!r})")
        names[name] = part
    return list(names)


def selected_models(config: pytest.Config) -> tuple[str, ...]:
    """``--model`` (each model once over all its uses, else a usage error) or all six; the extra cases
    (``minilm``) are not models of the suite's matrix: :func:`selected_cases` says whether they run."""
    chosen = [name for group in config.getoption("model") for name in group]
    repeated = sorted({name for name in chosen if chosen.count(name) > 1})
    if repeated:
        raise pytest.UsageError(f"--model: {', '.join(map(repr, repeated))} given more than once (an alias counts as "
                                f"the model it names); give each model once")
    models = tuple(name for name in chosen if name not in EXTRA_CASES)
    return models if chosen else MODEL_NAMES


def selected_cases(config: pytest.Config) -> tuple[str, ...]:
    """The extra cases to run: all of them without ``--model``, else only those ``--model`` names."""
    chosen = [name for group in config.getoption("model") for name in group]
    return tuple(case for case in EXTRA_CASES if not chosen or case in chosen)


def pytest_ignore_collect(collection_path, config):
    """An extra case's test module is not collected when ``--model`` leaves it out (``--model widedeep``), nor the
    six models' modules when ``--model`` names extra cases only (``--model minilm``)."""
    if collection_path.parent != Path(__file__).parent or not collection_path.name.startswith("test_"):
        return None
    case = EXTRA_CASE_MODULES.get(collection_path.name)
    if case is not None:
        return True if case not in selected_cases(config) else None
    chosen = [name for group in config.getoption("model") for name in group]
    return True if chosen and all(name in EXTRA_CASES for name in chosen) else None


def check_threads() -> None:
    """``CONFORMANCE_THREADS``, read by the emulator's kernels, is valid (a usage error naming it otherwise)."""
    try:
        worker_threads()
    except ValueError:
        raise pytest.UsageError(
            f"environment variable {THREADS_VARIABLE}={os.environ.get(THREADS_VARIABLE)!r} is not a positive integer; "
            f"set it to 1 or more (1 turns the emulator's threading off) or unset it (default: the cores, at most 8)"
        ) from None


def check_kernels() -> None:
    """``CONFORMANCE_KERNELS`` names a kernel path of the emulator (a usage error naming it otherwise)."""
    try:
        configured_path()
    except ValueError:
        raise pytest.UsageError(
            f"environment variable {KERNELS_VARIABLE}={os.environ.get(KERNELS_VARIABLE)!r} is not a kernel path; "
            f"set it to one of: {', '.join(KERNEL_PATHS)}, or unset it (default: numba)"
        ) from None


def selected_xfail_file(config: pytest.Config, hardware: str) -> Path:
    """``--xfail-file`` (a readable file, else a usage error naming the path), or the hardware's own file (which may
    be missing: no known failures)."""
    given = config.getoption("xfail_file")
    path = Path(given) if given is not None else xfails.xfail_file(hardware)
    if given is None and not path.exists():
        return path
    if not path.exists():
        raise pytest.UsageError(f"--xfail-file {path}: no such file")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise pytest.UsageError(f"--xfail-file {path}: {kind}; expected a known-failures file")
    try:
        path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise pytest.UsageError(f"--xfail-file {path}: cannot read it ({reason})") from None
    return path


def _shard(value: str):
    """argparse type of ``--shard``."""
    try:
        return parse_shard(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _model_path(value: str) -> tuple[str, Path]:
    """argparse type of ``--checkpoint`` and ``--dataset``: ``MODEL=PATH`` with a known model (or alias)."""
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not MODEL=PATH (e.g. resnet50=/data/imagenet)")
    try:
        return canonical_name(name.strip()), Path(path.strip()).expanduser()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None


def _sample_cap(value: str) -> tuple[str, int]:
    """argparse type of ``--samples``: ``N`` (every model) or ``MODEL=N``, N a positive integer."""
    name, sep, count = value.rpartition("=")
    try:
        model = canonical_name(name.strip()) if sep else "*"
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
    try:
        number = int(count)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected N or MODEL=N with N a positive integer")
    return model, number


def _per_model(config: pytest.Config, option: str, dest: str) -> dict:
    """``MODEL=VALUE`` options as a dict; a model given twice is a usage error."""
    out: dict = {}
    for name, value in config.getoption(dest):
        if name in out:
            shown = "N" if name == "*" else f"{name}=..."
            raise pytest.UsageError(f"{option} {shown} given more than once; give each model once")
        out[name] = value
    return out


def selected_cache_dir(config: pytest.Config) -> Path:
    """``--cache-dir`` or the platform's cache directory, created and writable (a usage error otherwise)."""
    given = config.getoption("cache_dir")
    try:
        return check_writable(given if given is not None else default_directory())
    except CacheError as exc:
        raise pytest.UsageError(f"--cache-dir: {exc}" if given is not None else str(exc)) from None


def _precision_names(value: str) -> list[str]:
    """argparse type of ``--precision``: a comma list; checked against the hardware's precisions in pytest_configure."""
    return [part.strip() for part in value.split(",") if part.strip()]


def selected_precisions(config: pytest.Config) -> tuple[str, ...]:
    """The precisions to test: ``--precision`` (each one the hardware has, else a usage error listing them) or all."""
    hardware = config.getoption("hardware")
    valid = get_backend(hardware).precisions
    chosen = [name for group in config.getoption("precision") for name in group]
    unknown = [name for name in chosen if name not in valid]
    if unknown:
        raise pytest.UsageError(
            f"--precision: unknown precision(s) {', '.join(map(repr, unknown))} for hardware {hardware!r}; "
            f"expected one or more of: {', '.join(valid)}"
        )
    return tuple(dict.fromkeys(chosen)) if chosen else tuple(valid)


def check_targets_runnable(settings: RunSettings) -> None:
    """Every performance target of the run is one the backend can run: a target it cannot (a scenario it does not
    support) is a mistake in the targets, a usage error before any test runs."""
    backend = get_backend(settings.hardware)
    try:
        targets = load_performance_targets().for_hardware(settings.hardware, settings.precisions, settings.models)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    for target in targets:
        reason = backend.scenario_support(target.model, target.precision, target.scenario)
        if reason:
            raise pytest.UsageError(f"performance target {target.test_id} of hardware {settings.hardware!r} cannot run: "
                                    f"{reason} (targets: {PERFORMANCE_FILE.name} of the suite or of the backend)")


def selected_device(config: pytest.Config) -> str | None:
    """``--device``, checked against the hardware's simulated chips (a usage error listing them otherwise)."""
    chip = config.getoption("device")
    if chip is not None:
        try:
            get_backend(config.getoption("hardware"), chip)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    return chip


def progress_line(config: pytest.Config, message: str) -> None:
    """One line of progress on the terminal (a long accuracy run says which model it is on)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"[conformance] {message}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "IPU conformance suite")
    group.addoption(
        "--hardware",
        choices=hardware_names(),
        default="cpu",
        help="hardware backend to test: %(choices)s (default: %(default)s)",
    )
    group.addoption(
        "--model",
        action="append",
        type=_model_names,
        default=[],
        metavar="NAME[,NAME...]",
        help="model(s) to run, repeatable or a comma list; minilm names the trained all-MiniLM-L6-v2 case "
        "(default: all six and minilm)",
    )
    group.addoption(
        "--profile",
        choices=PROFILE_NAMES,
        default="default",
        help="how many samples and which batch sizes: %(choices)s (default: %(default)s)",
    )
    group.addoption(
        "--report-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory for the run's reports and logs (default: none written)",
    )
    group.addoption(
        "--precision",
        action="append",
        type=_precision_names,
        default=[],
        metavar="NAME[,NAME...]",
        help="precision(s) to test, repeatable or a comma list, e.g. fp16,fp8 on ipu (default: all of the hardware's)",
    )
    group.addoption(
        "--diagnose",
        action="store_true",
        default=False,
        help="report the error layer by layer (SNR per op vs FP32) for every accuracy test, not only failing ones",
    )
    group.addoption(
        "--baseline",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="an earlier run's results.json: fail on accuracy drops or latency/throughput regressions beyond "
        "conformance/targets/regression.toml (default: no comparison)",
    )
    group.addoption(
        "--shard",
        type=_shard,
        default=None,
        metavar="I/N",
        help="run only the I-th of N deterministic shares of the tests, e.g. 2/4 (default: all tests)",
    )
    group.addoption(
        "--device",
        type=str.lower,
        default=None,
        metavar="CHIP",
        help="the simulated chip whose timing model the performance tests use, e.g. c600, gc200, bow on ipu "
        "(default: the hardware's first, c600)",
    )
    group.addoption(
        "--real-time-loadgen",
        action="store_true",
        default=False,
        help="run a simulated device's scenarios under the real LoadGen on the host's clock instead of on virtual time "
        "(a cross-check: latencies then include the host's scheduling)",
    )
    group.addoption(
        "--checkpoint",
        action="append",
        type=_model_path,
        default=[],
        metavar="MODEL=DIR",
        help="judge your trained checkpoint (a transformers save_pretrained directory; widedeep: its own layout) "
        "instead of the seeded weights; repeatable, one per model",
    )
    group.addoption(
        "--dataset",
        action="append",
        type=_model_path,
        default=[],
        metavar="MODEL=PATH",
        help="judge on your evaluation data (SQuAD v1.1 JSON, an image folder with val_map.txt, Criteo TSV, CAIL2019-SCM "
        "JSON lines, a conformer .npz) with task metrics against its labels; repeatable, one per model",
    )
    group.addoption(
        "--calibration",
        action="append",
        type=_model_path,
        default=[],
        metavar="MODEL=PATH",
        help="calibrate the FP8 input scales on this data (the --dataset formats; keep it disjoint from the evaluation "
        "data, e.g. MLPerf's calibration lists) instead of the model's synthetic calibration samples; repeatable",
    )
    group.addoption(
        "--allow-unused-weights",
        action="store_true",
        default=False,
        help="judge a --checkpoint whose model.safetensors holds tensors its config.json does not use (by default a "
        "usage error naming them); the report lists them",
    )
    group.addoption(
        "--samples",
        action="append",
        type=_sample_cap,
        default=[],
        metavar="N|MODEL=N",
        help="accuracy samples per model (a data set: at most N of its questions/images/triplets/rows, default all; "
        "otherwise N synthetic samples, default the profile's); repeatable",
    )
    group.addoption(
        "--cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where FP32 outputs of your checkpoints and data are cached (default: the platform's user cache "
        "directory, e.g. ~/.cache/ipu-conformance, or $IPU_CONFORMANCE_CACHE)",
    )
    group.addoption(
        "--xfail-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="known failures of the hardware (default: conformance/xfails/<hardware>.txt)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Check every option (and ``CONFORMANCE_THREADS``) and every data file before any test runs, then open the
    report; a data file that is not valid is a usage error naming the file, line and key."""
    try:
        _configure(config)
    except DataFileError as exc:
        raise pytest.UsageError(str(exc)) from None


def check_data_files() -> None:
    """Load (and so validate) the suite's data files a run reads; the backend's own are validated by its constructor,
    the performance targets by :func:`check_targets_runnable`."""
    load_profiles()
    load_audit_config()
    load_tolerances()
    load_label_floors()


def _configure(config: pytest.Config) -> None:
    models = selected_models(config)
    hardware = config.getoption("hardware")
    check_threads()
    check_kernels()
    settings = RunSettings(
        hardware=hardware,
        models=models,
        profile=config.getoption("profile"),
        precisions=selected_precisions(config),
        report_dir=config.getoption("report_dir"),
        diagnose=config.getoption("diagnose"),
        baseline=config.getoption("baseline"),
        shard=config.getoption("shard"),
        xfail_file=selected_xfail_file(config, hardware),
        device=selected_device(config),
        real_time_loadgen=config.getoption("real_time_loadgen"),
        checkpoints=_per_model(config, "--checkpoint", "checkpoint"),
        datasets=_per_model(config, "--dataset", "dataset"),
        samples=_per_model(config, "--samples", "samples"),
        calibrations=_per_model(config, "--calibration", "calibration"),
    )
    if settings.checkpoints or settings.datasets or settings.calibrations:
        settings = replace(settings, cache_dir=selected_cache_dir(config))
    check_data_files()
    accuracy_targets.check_complete(settings.hardware, settings.models)
    check_targets_runnable(settings)
    try:  # the user's checkpoints and data are read and checked before any test runs
        config.stash[USER_CASES_KEY] = load_cases(settings.models, settings.checkpoints, settings.datasets,
                                                  settings.samples, settings.calibrations,
                                                  config.getoption("allow_unused_weights"))
    except UserInputError as exc:
        raise pytest.UsageError(str(exc)) from None
    # the stored FP32 references of the other models are readable and what the manifest says (a ReferenceError is a
    # DataFileError: a usage error naming the file)
    reference.check_files([name for name in settings.models if name not in config.stash[USER_CASES_KEY]])
    config.add_cleanup(terminate_as_interrupt())  # SIGTERM stops the run as Ctrl-C does: exit 2, the report written
    # the report's hooks (collection, reports, session finish, terminal summary) are methods of this object
    report = ReportSession(config, settings)
    config.stash[REPORT_KEY] = report
    config.add_cleanup(report.close)
    report.open()  # last: locks the report directory (released by the cleanup, whatever happens next)
    config.pluginmanager.register(report, "conformance-report")
    # the tests write their artifacts and LoadGen logs into the run's staging directory (settings.report_dir)
    config.stash[SETTINGS_KEY] = report.test_settings()


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash[SETTINGS_KEY]
    backend = get_backend(settings.hardware)
    versions = {"python": platform.python_version(), "numpy": numpy.__version__, **backend.versions()}
    return [
        f"conformance: hardware={settings.hardware} ({backend.description}), precisions={','.join(backend.precisions)}",
        f"conformance: profile={settings.profile}, models={','.join(settings.models)}",
        "conformance: versions " + ", ".join(f"{k}={v}" for k, v in versions.items()),
        *(f"conformance: {name} judged: {describe_case(case)}" for name, case in config.stash[USER_CASES_KEY].items()),
    ]


def describe_case(case: UserCase) -> str:
    """One line: the checkpoint and data set of a user's case."""
    parts = [f"checkpoint {case.checkpoint['path']} (sha256 {case.checkpoint['sha256'][:12]})" if case.checkpoint
             else "seeded weights"]
    if case.evaluation is not None:
        data = case.evaluation.provenance
        parts.append(f"{data['format']} {data['path']} ({case.evaluation.units} units, labels: {data['labels']})")
    else:
        parts.append("synthetic samples")
    return ", ".join(parts)
