"""Every option and environment variable of the main job, declared once: its flag, how one command-line value is read
(``parse``: the argparse type), its default and help, and its ``check``, which turns what was given into the
:class:`~conformance.settings.run.RunSettings` field, against the options settled before it (``--precision`` against
the hardware's precisions, ``--xfail-file``'s default against the hardware). ``pytest_addoption`` is generated from
:data:`OPTIONS` and :func:`settle` makes the run's settings from it; a bad value is a :class:`SettingsError` (or, for
one value that cannot be read, argparse's error) naming the option, the value and what is expected: a usage error.

Numbers are integers written in ASCII digits, from 1 to a bound that means something (``--samples`` to the largest
sample count the suite's data files allow, ``--shard`` to more shares than the suite has tests); paths are not empty
and hold no NUL character."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boundedio import InputFileError, ascii_integer, read_text
from conformance.datasets.cache import (
    CACHE_VARIABLE,
    WEIGHT_CACHE_VARIABLE,
    CacheError,
    check_writable,
    default_directory,
    weight_cache_enabled,
)
from conformance.distributed import EngineError, check_address
from conformance.hardware import Backend, get_backend, hardware_names
from conformance.numerics import arrays
from conformance.numerics.compiled import KERNEL_PATHS, KERNELS_VARIABLE, configured_path
from conformance.numerics.formats import THREADS_VARIABLE, worker_threads
from conformance.report import xfails
from conformance.report.shard import Shard, parse_shard
from conformance.settings.run import RunSettings
from conformance.targets import accuracy as accuracy_targets
from conformance.targets.bounds import MAX_SAMPLES
from conformance.targets.profiles import PROFILE_NAMES
from models import MODEL_NAMES, canonical_name

# cases beside the six models (their gates are in accuracy.toml), run when --model is not given or names them
EXTRA_CASES = tuple(accuracy_targets.EXTRA_CASES)
MAX_SHARDS = 1000  # more shares than the suite has tests: every share beyond the tests' count would run nothing
MAX_THREADS = 1024  # emulator threads: more than any host's cores
MAX_DIGITS = 20  # an integer option written with more digits than this is not a count
MAX_WORKERS = 256  # local worker processes: more than any one host's cores


class SettingsError(ValueError):
    """An option or environment variable that is not valid, or options that do not go together: a usage error."""


# -- reading one command-line value (argparse types: an ArgumentTypeError names the value, argparse the option) ------

def _integer(text: str, low: int, high: int) -> int:
    """``text`` as an integer from ``low`` to ``high``, written in ASCII digits; a ValueError otherwise."""
    return ascii_integer(text, low, high)


def parse_path(value: str) -> Path:
    """A path option's value: not empty (``--report-dir ''`` is not the current directory) and without a NUL."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not a path (empty); expected a file or directory name")
    if "\0" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not a path: it holds a NUL character")
    return Path(value).expanduser()


def parse_models(value: str) -> list[str]:
    """``--model``: one name or a comma list, each a known model or alias (or an extra case), none empty or repeated."""
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


def parse_precisions(value: str) -> list[str]:
    """``--precision``: a comma list of names, none empty; checked against the hardware's precisions by its check."""
    names = [part.strip() for part in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{value!r} has an empty precision name; expected NAME[,NAME...]")
    return names


def parse_shard_option(value: str) -> Shard:
    """``--shard I/N``, N at most :data:`MAX_SHARDS`."""
    index, sep, count = value.partition("/")
    try:
        if not sep:
            raise ValueError("no /")
        ascii_integer(index, 0, 10 ** MAX_DIGITS)
        ascii_integer(count, 0, 10 ** MAX_DIGITS)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value[:40]!r}: expected I/N with integers written in digits 0-9, "
                                         "e.g. 1/4") from None
    try:
        shard = parse_shard(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if shard.count > MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"--shard {value!r}: expected at most {MAX_SHARDS} shares (N); the suite has "
                                         "fewer tests than that")
    return shard


def parse_model_path(value: str) -> tuple[str, Path]:
    """``--checkpoint``, ``--dataset``, ``--calibration``: ``MODEL=PATH`` with a known model (or alias)."""
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not MODEL=PATH (e.g. resnet50=/data/imagenet)")
    try:
        model = canonical_name(name.strip())
    except ValueError as exc:
        if name.strip() == ALL_SAMPLES or not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", name.strip()):
            raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
        model = name.strip()  # a case of --onnx, or an unknown model: told apart by the option's check
    return model, parse_path(path.strip())


ALL_SAMPLES = "all"  # --samples all / MODEL=all: the whole of a user's data set


def parse_sample_cap(value: str) -> tuple[str, int | str]:
    """``--samples``: ``N`` (every model) or ``MODEL=N``, N a positive integer of at most the samples a file holds, or
    ``all`` / ``MODEL=all`` (:data:`ALL_SAMPLES`: checked against the data sets by :func:`check_samples`)."""
    name, sep, count = value.rpartition("=")
    try:
        model = canonical_name(name.strip()) if sep else "*"
    except ValueError as exc:
        if name.strip() == ALL_SAMPLES or not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", name.strip()):
            raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
        model = name.strip()  # a case of --onnx, or an unknown model: told apart by the option's check
    if count.strip() == ALL_SAMPLES:
        return model, ALL_SAMPLES
    try:
        number = _integer(count, 1, MAX_SAMPLES)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: expected N or MODEL=N with N a positive integer of at most "
                                         f"{MAX_SAMPLES:,} ({exc}), or {ALL_SAMPLES} / MODEL={ALL_SAMPLES} for the "
                                         "whole of a data set given with --dataset") from None
    return model, number


def parse_workers(value: str) -> int:
    """``--workers N``: local worker processes, from 1 to :data:`MAX_WORKERS`."""
    try:
        return _integer(value, 1, MAX_WORKERS)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value[:40]!r}: expected the number of local worker processes ({exc})") \
            from None


def parse_cluster(value: str) -> str:
    """``--cluster ADDRESS``: a scheduler address, normalised (``HOST:PORT`` -> ``tcp://HOST:PORT``); whether it
    answers is checked before any test runs (:mod:`conformance.settings.checks`)."""
    try:
        return check_address(value)
    except EngineError as exc:  # argparse names the option
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--cluster ")) from None


def parse_array(value: str) -> str:
    """``--array NAME[:DEVICE]``: a known library and a device of its form (``torch`` is ``torch:cpu``); whether it
    is installed and the device present is its check's."""
    try:
        return arrays.parse(value).spec
    except arrays.ArrayLibraryError as exc:  # argparse names the option
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_chip(value: str) -> str:
    """``--device``: a chip name, compared in lower case; checked against the hardware's chips by its check."""
    if not value.strip() or "\0" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not a chip name; expected e.g. c600")
    return value.strip().lower()


# -- checking what was given against the options settled before it ----------------------------------------------------

class Settled:
    """The fields settled so far (in the table's order) and the run's backend, made once from ``--hardware`` and
    ``--device`` when a check first needs it."""

    def __init__(self, given: Mapping[str, Any]):
        self.given = given  # every option's value as parsed, by dest
        self.fields: dict[str, Any] = {}
        self._backend: Backend | None = None

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            try:
                self._backend = get_backend(self.fields["hardware"], self.given.get("device"))
            except ValueError as exc:  # an unknown chip names --device; a data file that is not valid names itself
                raise SettingsError(str(exc)) from None
        return self._backend


def _as_given(value, settled: Settled):
    """Options whose parse (or argparse's choices) is the whole check."""
    return value


def _switch(value, settled: Settled) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"expected a switch (given or not), got {value!r}")
    return value


def _not(value, settled: Settled) -> bool:
    """A switch that turns something off: its field is the opposite of the switch."""
    return not _switch(value, settled)


def _one_of(names: Callable[[], tuple[str, ...]], flag: str):
    def check(value, settled: Settled) -> str:
        if value not in names():
            raise SettingsError(f"{flag} {value!r}: expected one of: {', '.join(names())}")
        return value
    return check


def check_selection(groups: list[list[str]], settled: Settled) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``--model``: (the models, the extra cases): each name once over all uses, else all six and every extra case."""
    chosen = [name for group in groups for name in group]
    repeated = sorted({name for name in chosen if chosen.count(name) > 1})
    if repeated:
        raise SettingsError(f"--model: {', '.join(map(repr, repeated))} given more than once (an alias counts as "
                            f"the model it names); give each model once")
    models = tuple(name for name in chosen if name not in EXTRA_CASES)
    everything = not chosen and not settled.fields.get("onnx")  # --onnx alone judges the graphs only
    cases = tuple(case for case in EXTRA_CASES if everything or case in chosen)
    return (MODEL_NAMES if everything else models), cases


def parse_onnx(value: str) -> tuple[str, Path]:
    """``--onnx``: ``NAME=FILE.onnx`` (the graph is read and checked by its check)."""
    name, sep, path = value.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=FILE.onnx (e.g. vit=/models/vit.onnx)")
    try:
        known = name.strip().lower() in EXTRA_CASES or bool(canonical_name(name.strip()))
    except ValueError:
        known = False
    if known:
        raise argparse.ArgumentTypeError(f"{value!r}: {name.strip()!r} names a model of the suite; give the graph a "
                                         "new case name")
    return name.strip(), parse_path(path.strip())


def check_onnx(pairs: list[tuple[str, Path]], settled: Settled) -> dict:
    """``--onnx``: each graph read, checked by the interpreter and onnxruntime, its inputs drawable, with gates for
    imported graphs on the hardware (a usage error naming the file and node otherwise)."""
    if not pairs:
        return {}
    from conformance.graphs import GraphCase, GraphCaseError  # onnx loads only when a graph is given

    hardware = settled.fields["hardware"]
    if not accuracy_targets.matrix(hardware, [accuracy_targets.GRAPH_CASE]):
        raise SettingsError(f"--onnx: hardware {hardware!r} has no [{hardware}.{accuracy_targets.GRAPH_CASE}."
                            f"<precision>] gates in {accuracy_targets.ACCURACY_FILE.name}")
    cases: dict = {}
    given = {option: _graph_values(option, settled.given[option.removeprefix("--")], [n for n, _ in pairs])
             for option in ("--dataset", "--calibration", "--checkpoint", "--samples")}
    for name, path in pairs:
        if name in cases:
            raise SettingsError(f"--onnx {name}=... given more than once; give each case once")
        sources = {option: _data_source(option, name, given[option].get(name)) for option in ("--dataset",
                                                                                              "--calibration")}
        samples = given["--samples"].get(name, given["--samples"].get("*"))
        try:
            cases[name] = GraphCase(name, path, sources["--dataset"], sources["--calibration"], samples=samples,
                                    preprocessing=given["--checkpoint"].get(name), calibrates=any(
                                        "fp8" in p for _, p in accuracy_targets.matrix(
                                            hardware, [accuracy_targets.GRAPH_CASE])))
        except GraphCaseError as exc:
            raise SettingsError(str(exc)) from None
    return cases


def _graph_values(option: str, pairs, names: list[str]) -> dict:
    """``option``'s values for the graphs ``names`` (and ``*``, --samples' global N), each given once."""
    out: dict = {}
    for name, value in pairs:
        if name in names or (name == "*" and option == "--samples"):
            if name in out:
                shown = "N" if name == "*" else f"{name}=..."
                raise SettingsError(f"{option} {shown} given more than once; give each case once")
            out[name] = value
    return out


def _data_source(option: str, name: str, path: Path | None):
    """A graph's ``--dataset`` / ``--calibration``: ``TASK:PATH`` (TASK one of the six models, whose data format and
    preprocessing apply) or the path of a ``.npz`` keyed by the graph's input names."""
    from conformance.graphs.case import DataSource  # onnx loads only when a graph is given

    if path is None:
        return None
    task, sep, rest = str(path).partition(":")
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", task):
        return DataSource(path)
    try:
        task = canonical_name(task)
    except ValueError:
        if path.exists():
            return DataSource(path)
        raise SettingsError(f"{option} {name}={path}: {task!r} is not a task; expected TASK:PATH with TASK one of "
                            f"{', '.join(MODEL_NAMES)} (whose data format and preprocessing apply), or the path of a "
                            ".npz keyed by the graph's input names") from None
    if not rest.strip():
        raise SettingsError(f"{option} {name}={path}: no path after {task}:; expected {task}:PATH, the data set in "
                            f"{task}'s format")
    return DataSource(Path(rest.strip()), task)


def check_precisions(groups: list[list[str]], settled: Settled) -> tuple[str, ...]:
    """``--precision``: each one the hardware has (a usage error listing them otherwise), or all of them."""
    valid = settled.backend.precisions
    chosen = [name for group in groups for name in group]
    unknown = [name for name in chosen if name not in valid]
    if unknown:
        raise SettingsError(f"--precision: unknown precision(s) {', '.join(map(repr, unknown))} for hardware "
                            f"{settled.fields['hardware']!r}; expected one or more of: {', '.join(valid)}")
    return tuple(dict.fromkeys(chosen)) if chosen else tuple(valid)


def check_device(chip: str | None, settled: Settled) -> str | None:
    """``--device``: a chip of the hardware (the backend is made on it: a usage error listing the chips otherwise)."""
    if chip is not None:
        settled.backend  # noqa: B018 - made on the chip, or refused naming it
    return chip


def _per_model(flag: str):
    """``MODEL=VALUE`` options as a dict; a model given twice is a usage error."""
    def check(pairs, settled: Settled) -> dict:
        out: dict = {}
        for name, value in pairs:
            if name in settled.fields.get("onnx", {}):
                continue  # an imported graph's inputs: read with the graph (--onnx)
            if name != "*":
                try:
                    canonical_name(name)
                except ValueError as exc:
                    raise SettingsError(f"{flag} {name}=...: {exc}; or a case of --onnx") from None
            if name in out:
                shown = "N" if name == "*" else f"{name}=..."
                raise SettingsError(f"{flag} {shown} given more than once; give each model once")
            out[name] = value
        return out
    return check


def check_samples(pairs, settled: Settled) -> dict[str, int]:
    """``--samples``: the caps by model (``*``: every model). ``all`` asks for the whole of a user's data set, which
    is what a data set runs without a cap: a model it applies to without ``--dataset`` is a usage error naming it;
    otherwise it caps nothing, and a global ``N`` given beside it is spelled out for the other selected models."""
    given = _per_model("--samples")(pairs, settled)
    if ALL_SAMPLES not in given.values():
        return given
    models, datasets = settled.fields["models"], settled.fields["datasets"]
    whole = [name for name in dict.fromkeys([*models, *given]) if name != "*"
             and given.get(name, given.get("*")) == ALL_SAMPLES]
    without = [name for name in whole if name not in datasets]
    if without:
        shown = ALL_SAMPLES if given.get("*") == ALL_SAMPLES else ", ".join(f"{n}={ALL_SAMPLES}" for n in without)
        model = without[0] if len(without) == 1 else "MODEL"
        raise SettingsError(f"--samples {shown}: {ALL_SAMPLES} means the whole of a user's data set, and "
                            f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} none; give --dataset "
                            f"{model}=PATH, or a number of synthetic samples (--samples {model}=N; default: the "
                            "profile's)")
    caps = {name: value for name, value in given.items() if value != ALL_SAMPLES}
    if "*" in caps:
        every = caps.pop("*")
        caps = {**{name: every for name in models if name not in whole}, **caps}
    return caps


def check_cluster(address: str | None, settled: Settled) -> str | None:
    """``--cluster``: not with ``--workers`` (one engine runs the batches)."""
    if address is not None and settled.fields["workers"] is not None:
        raise SettingsError(f"--workers {settled.fields['workers']} and --cluster {address}: give one of them (local "
                            "workers, or a running cluster's scheduler), not both")
    return address


def check_array(spec: str, settled: Settled) -> str:
    """``--array``: a known library whose package imports and whose device is present here (with ``--workers`` or
    ``--cluster`` the workers are asked too, as the engine starts)."""
    try:
        library = arrays.load(spec)
    except arrays.ArrayLibraryError as exc:
        raise SettingsError(f"--array {spec}: {exc}") from None
    if not library.is_numpy and configured_path() == "numpy":
        raise SettingsError(f"--array {library.spec} and {KERNELS_VARIABLE}=numpy: the numpy kernel path (the oracle) "
                            "computes on numpy; unset the variable or leave --array out")
    return library.spec


def check_cache_dir(given: Path | None, settled: Settled) -> Path | None:
    """``--cache-dir`` or the platform's cache directory, created and writable, when a user's checkpoint, data set
    or calibration data is judged (their FP32 outputs are cached) or the accuracy batches run on workers (each
    computed batch is kept); None otherwise."""
    fields = settled.fields
    distributed = fields["workers"] is not None or fields["cluster"] is not None
    if not (fields["checkpoints"] or fields["datasets"] or fields["calibrations"] or distributed):
        return None
    try:
        return check_writable(given if given is not None else default_directory())
    except CacheError as exc:
        raise SettingsError(f"--cache-dir: {exc}" if given is not None else str(exc)) from None


def check_xfail_file(given: Path | None, settled: Settled) -> Path:
    """``--xfail-file`` (a readable file, else a usage error naming the path), or the hardware's own file (which may
    be missing: no known failures)."""
    path = given if given is not None else xfails.xfail_file(settled.fields["hardware"])
    if given is None and not path.exists():
        return path
    if not path.exists():
        raise SettingsError(f"--xfail-file {path}: no such file")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise SettingsError(f"--xfail-file {path}: {kind}; expected a known-failures file")
    try:
        read_text(path, "a known-failures file", xfails.XFAIL_LIMIT)
    except InputFileError as exc:  # too large, not UTF-8 (naming the line)
        raise SettingsError(f"--xfail-file {exc}") from None
    except OSError as exc:
        raise SettingsError(f"--xfail-file {path}: cannot read it ({exc.strerror or exc})") from None
    return path


# -- the table ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    flag: str
    help: str  # %(default)s and %(choices)s are filled in by argparse
    check: Callable[[Any, Settled], Any]  # what was given -> the value of the field(s) (a tuple for several)
    parse: Callable[[str], Any] | None = None  # one command-line value -> a typed value (argparse's type)
    default: Any = None
    choices: Callable[[], tuple[str, ...]] | None = None
    repeatable: bool = False  # given several times: the list of the parsed values
    switch: bool = False  # a flag without a value (store_true)
    metavar: str | None = None
    fields: tuple[str, ...] = ()  # the RunSettings fields it fills (default: the one named as its dest)
    # the key of results.json's settings its value is recorded as (how shards agree on it and runs are compared on it
    # is stated on that key: conformance.report.record.Settings), or None: not recorded (it does not change what the
    # figures mean). Every option says which.
    recorded: str | None = field(kw_only=True)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def settles(self) -> tuple[str, ...]:
        return self.fields or (self.dest,)

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``addoption`` / ``add_argument``."""
        if self.switch:
            return {"action": "store_true", "default": False, "help": self.help}
        out: dict[str, Any] = {"default": [] if self.repeatable else self.default, "help": self.help}
        if self.repeatable:
            out["action"] = "append"
        if self.parse is not None:
            out["type"] = self.parse
        if self.choices is not None:
            out["choices"] = self.choices()
        if self.metavar is not None:
            out["metavar"] = self.metavar
        return out


OPTIONS: tuple[Option, ...] = (
    Option("--hardware", "hardware backend to test: %(choices)s (default: %(default)s)",
           _one_of(hardware_names, "--hardware"), default="cpu", choices=hardware_names, recorded="hardware"),
    Option("--onnx", "judge an ONNX graph (opset 17 or later, FP32, a dynamic batch axis) run through the hardware's "
           "ops against onnxruntime at every precision, on inputs drawn from its signature (--samples NAME=N of them, "
           "default 8) or given by --dataset NAME=FILE.npz or NAME=TASK:PATH (a data set in the format of TASK, one of "
           "the six models, scored against its labels; --checkpoint NAME=DIR gives its tokenizer or image "
           "preprocessing); repeatable; without --model only the graphs run", check_onnx, parse=parse_onnx, repeatable=True, metavar="NAME=FILE.onnx",
           recorded=None),
    Option("--model", "model(s) to run, repeatable or a comma list; minilm names the trained all-MiniLM-L6-v2 case "
           "(default: all six and minilm)", check_selection, parse=parse_models, repeatable=True,
           metavar="NAME[,NAME...]", fields=("models", "cases"), recorded="models"),
    Option("--profile", "how many samples and which batch sizes: %(choices)s; release is the release gate (every gated "
           "check established), default the everyday gate (every sampled FP32 decision must survive), smoke a quick "
           "look (default: %(default)s)",
           _one_of(lambda: PROFILE_NAMES, "--profile"), default="default", choices=lambda: PROFILE_NAMES,
           recorded="profile"),
    Option("--report-dir", "directory for the run's reports and logs (default: none written)", _as_given,
           parse=parse_path, metavar="DIR", recorded=None),
    Option("--precision", "precision(s) to test, repeatable or a comma list, e.g. fp16,fp8 on ipu (default: all of "
           "the hardware's)", check_precisions, parse=parse_precisions, repeatable=True, metavar="NAME[,NAME...]",
           fields=("precisions",), recorded="precisions"),
    Option("--diagnose", "report the error layer by layer (SNR per op vs FP32) for every accuracy test, not only "
           "failing ones", _switch, switch=True, recorded=None),
    Option("--no-plots", "write the report without its figures (the histograms, layer profiles and latency and "
           "throughput plots of plots/ and the HTML report): a quicker report where no one looks at them (default: "
           "drawn where matplotlib is installed)", _not, switch=True, fields=("plots",), recorded=None),
    Option("--baseline", "an earlier run's results.json: fail on accuracy drops or latency/throughput regressions "
           "beyond conformance/targets/regression.toml (default: no comparison)", _as_given, parse=parse_path,
           metavar="RESULTS_JSON", recorded="baseline"),
    Option("--shard", f"run only the I-th of N deterministic shares of the tests, e.g. 2/4, N at most {MAX_SHARDS} "
           "(default: all tests)", _as_given, parse=parse_shard_option, metavar="I/N", recorded="shard"),
    Option("--device", "the simulated chip whose timing model the performance tests use, e.g. c600, gc200, bow on ipu "
           "(default: the hardware's first, c600)", check_device, parse=parse_chip, metavar="CHIP", recorded="device"),
    Option("--real-time-loadgen", "run a simulated device's scenarios under the real LoadGen on the host's clock "
           "instead of on virtual time (a cross-check: latencies then include the host's scheduling)", _switch,
           switch=True, recorded="real_time_loadgen"),
    Option("--checkpoint", "judge your trained checkpoint (a transformers save_pretrained directory; widedeep: its own "
           "layout) instead of the seeded weights; repeatable, one per model", _per_model("--checkpoint"),
           parse=parse_model_path, repeatable=True, metavar="MODEL=DIR", fields=("checkpoints",),
           recorded="checkpoints"),
    Option("--dataset", "judge on your evaluation data (SQuAD v1.1 JSON, an image folder with val_map.txt, Criteo TSV, "
           "CAIL2019-SCM JSON lines, a conformer .npz) with task metrics against its labels; repeatable, one per model",
           _per_model("--dataset"), parse=parse_model_path, repeatable=True, metavar="MODEL=PATH",
           fields=("datasets",), recorded="datasets"),
    Option("--calibration", "calibrate the FP8 input scales on this data (the --dataset formats; keep it disjoint from "
           "the evaluation data, e.g. MLPerf's calibration lists) instead of the model's synthetic calibration samples; "
           "repeatable", _per_model("--calibration"), parse=parse_model_path, repeatable=True, metavar="MODEL=PATH",
           fields=("calibrations",), recorded="calibrations"),
    Option("--allow-unused-weights", "judge a --checkpoint whose model.safetensors holds tensors its config.json does "
           "not use (by default a usage error naming them); the report lists them", _switch, switch=True,
           recorded=None),
    Option("--samples", "accuracy samples per model (a data set: at most N of its questions/images/triplets/rows, "
           "default all; otherwise N synthetic samples, default the profile's; an --onnx graph: N inputs drawn, default "
           "8, or the first N of its --dataset); all or MODEL=all: the whole of the --dataset (a usage error for a "
           "model without one); repeatable", check_samples,
           parse=parse_sample_cap, repeatable=True, metavar="N|MODEL=N|all", recorded="samples"),
    Option("--workers", "run the accuracy tests' batches on N local worker processes (Dask), each computed batch "
           f"kept in the cache directory so that an interrupted run resumes; N from 1 to {MAX_WORKERS}, not with "
           "pytest-xdist's -n (default: in the test's process)", _as_given, parse=parse_workers, metavar="N",
           recorded=None),
    Option("--cluster", "run the accuracy tests' batches on the running Dask cluster whose scheduler is at ADDRESS "
           "([tcp://]HOST:PORT; its workers run this version of the suite), each computed batch kept in the cache "
           "directory; not with --workers or -n (default: in the test's process)", check_cluster, parse=parse_cluster,
           metavar="ADDRESS", recorded=None),
    Option("--array", "the array library and device the emulator's roundings and matrix kernels compute on: numpy, "
           "torch:cpu or torch:cuda[:N] (the torch extra); the same bits except the order of FP32 sums (default: "
           "%(default)s)", check_array, parse=parse_array, default=arrays.DEFAULT, metavar="NAME[:DEVICE]",
           recorded="array"),
    Option("--cache-dir", "where FP32 outputs of your checkpoints and data, and with --workers or --cluster the "
           "accuracy batches, are cached (default: the platform's user "
           f"cache directory, e.g. ~/.cache/ipu-conformance, or ${CACHE_VARIABLE})", check_cache_dir,
           parse=parse_path, metavar="DIR", recorded=None),
    Option("--xfail-file", "known failures of the hardware (default: conformance/xfails/<hardware>.txt)",
           check_xfail_file, parse=parse_path, metavar="FILE", recorded="xfail_file"),
)


# -- environment variables ----------------------------------------------------------------------------------------

def check_threads(value: str) -> None:
    """The emulator's threads: what :func:`~conformance.numerics.formats.worker_threads` reads, at most
    :data:`MAX_THREADS`."""
    try:
        threads = worker_threads()
    except ValueError:
        raise SettingsError(
            f"environment variable {THREADS_VARIABLE}={value[:40]!r} is not a positive integer written in digits 0-9; "
            f"set it to 1 or more (1 turns the emulator's threading off) or unset it (default: the cores, at most 8)"
        ) from None
    if threads > MAX_THREADS:
        raise SettingsError(f"environment variable {THREADS_VARIABLE}={value[:40]!r} is more threads than any host's "
                            f"cores; set it to at most {MAX_THREADS} or unset it (default: the cores, at most 8)")


def check_kernels(value: str) -> None:
    """The emulator's kernel path: what :func:`~conformance.numerics.compiled.configured_path` reads."""
    try:
        configured_path()
    except ValueError:
        raise SettingsError(f"environment variable {KERNELS_VARIABLE}={value!r} is not a kernel path; set it to one "
                            f"of: {', '.join(KERNEL_PATHS)}, or unset it (default: numba)") from None


def check_cache_variable(value: str) -> None:
    """The default cache directory (used, and then created, only when a user's case is judged)."""
    if "\0" in value:
        raise SettingsError(f"environment variable {CACHE_VARIABLE}={value!r} is not a path: it holds a NUL character")


def check_weight_cache_variable(value: str) -> None:
    """Whether seeded weights are cached: what :func:`~conformance.datasets.cache.weight_cache_enabled` reads."""
    try:
        weight_cache_enabled()
    except ValueError:
        raise SettingsError(f"environment variable {WEIGHT_CACHE_VARIABLE}={value[:40]!r} is not a switch; set it to 0 "
                            "(build seeded weights in every run) or 1, or unset it (default: cached)") from None


# variable -> its check of a set, non-empty value (empty is as if unset)
ENVIRONMENT: dict[str, Callable[[str], None]] = {
    THREADS_VARIABLE: check_threads,
    KERNELS_VARIABLE: check_kernels,
    CACHE_VARIABLE: check_cache_variable,
    WEIGHT_CACHE_VARIABLE: check_weight_cache_variable,
}


def check_environment() -> None:
    """Every variable of :data:`ENVIRONMENT` that is set; a SettingsError naming the first that is not valid."""
    for name, check in ENVIRONMENT.items():
        value = os.environ.get(name, "")
        if value:
            check(value)


def settle(given: Mapping[str, Any] | Callable[[str], Any]) -> RunSettings:
    """The run's settings from every option's parsed value (a mapping by dest, or pytest's ``config.getoption``),
    each checked in the table's order, and the environment; a SettingsError on the first that is not valid."""
    get = given if callable(given) else given.__getitem__
    settled = Settled({option.dest: get(option.dest) for option in OPTIONS})
    check_environment()
    for option in OPTIONS:
        value = option.check(settled.given[option.dest], settled)
        values = value if len(option.settles) > 1 else (value,)
        settled.fields.update(zip(option.settles, values, strict=True))
    return RunSettings(**settled.fields, backend=settled.backend)
