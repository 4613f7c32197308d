"""The table of the main job's options (conformance.settings.options): every option declared once with its check, every
RunSettings field filled by one option, the run's one backend, and options read through the same argparse arguments
pytest is given: a bad value is a usage error naming the option, never a traceback (a Hypothesis property)."""

from __future__ import annotations

import dataclasses
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cli import UsageParser
from conformance.datafiles import DataFileError
from conformance.hardware import hardware_names
from conformance.numerics.compiled import KERNELS_VARIABLE
from conformance.datasets.cache import CACHE_VARIABLE
from conformance.settings import ENVIRONMENT, OPTIONS, RunSettings, SettingsError, settle
from conformance.settings.checks import check_engine
from conformance.settings.options import MAX_SHARDS, MAX_WORKERS, THREADS_VARIABLE
from conformance.targets.bounds import MAX_SAMPLES
from models import MODEL_NAMES

# RunSettings fields no option fills: where the report is published (set by the report), and the backend (made)
NOT_OPTIONS = {"published_report_dir", "backend"}


def _parser() -> UsageParser:
    parser = UsageParser(prog="pytest")
    for option in OPTIONS:
        parser.add_argument(option.flag, **option.arguments())
    return parser


def _settle(*argv: str) -> RunSettings:
    return settle(vars(_parser().parse_args(list(argv))))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))  # never the user's cache
    monkeypatch.chdir(tmp_path)


def test_every_option_is_declared_once_with_its_check_and_help():
    flags = [option.flag for option in OPTIONS]
    assert len(flags) == len(set(flags)) and all(flag.startswith("--") for flag in flags)
    for option in OPTIONS:
        assert callable(option.check), option.flag
        assert option.help.strip(), option.flag
        # a value is read by a parse or chosen from a closed set, or the option is a switch
        assert option.switch or option.parse is not None or option.choices is not None, option.flag


def test_every_settings_field_is_filled_by_exactly_one_option():
    filled = [name for option in OPTIONS for name in option.settles]
    assert len(filled) == len(set(filled)), f"fields filled twice: {filled}"
    fields = {f.name for f in dataclasses.fields(RunSettings)}
    assert set(filled) == fields - NOT_OPTIONS


def test_defaults_settle_into_the_documented_run():
    run = _settle()
    assert (run.hardware, run.profile, run.models, run.cases) == ("cpu", "default", MODEL_NAMES, ("minilm",))
    assert run.precisions == tuple(run.backend.precisions) and run.backend.name == "cpu"
    assert run.samples == {} and run.cache_dir is None and run.shard is None and not run.allow_unused_weights


def test_the_run_has_one_backend_made_on_its_chip_and_kept_by_copies():
    run = _settle("--hardware", "ipu", "--device", "GC200", "--precision", "fp16,fp8", "--model", "minilm")
    assert run.backend.name == "ipu" and run.backend.chip == "gc200" and run.device == "gc200"
    assert (run.models, run.cases, run.precisions) == ((), ("minilm",), ("fp16", "fp8"))
    copy = dataclasses.replace(run, report_dir=None)
    assert copy.backend is run.backend
    with pytest.raises(ValueError, match="given the backend of 'ipu'"):
        dataclasses.replace(run, hardware="cpu", device=None)


@pytest.mark.parametrize("argv, says", [
    (["--precision", "fp4"], "--precision: unknown precision(s) 'fp4' for hardware 'cpu'; expected one or more of: fp32"),
    (["--hardware", "ipu", "--device", "h100"], "--device h100: unknown chip for hardware 'ipu'; expected one of: c600"),
    (["--hardware", "cpu", "--device", "c600"], "--device c600: hardware 'cpu' has no simulated chips"),
    (["--model", "widedeep", "--model", "wide&deep"], "--model: 'widedeep' given more than once"),
    (["--samples", "3", "--samples", "4"], "--samples N given more than once"),
    (["--checkpoint", "widedeep=a", "--checkpoint", "widedeep=b"], "--checkpoint widedeep=... given more than once"),
    (["--xfail-file", "none.txt"], "--xfail-file none.txt: no such file"),
    (["--xfail-file", "."], "--xfail-file .: a directory"),
    (["--workers", "2", "--cluster", "10.0.0.5:8786"],
     "--workers 2 and --cluster tcp://10.0.0.5:8786: give one of them (local workers, or a running cluster's"),
])
def test_checks_name_the_option_and_what_is_expected(argv, says):
    with pytest.raises(SettingsError) as info:
        _settle(*argv)
    assert says in str(info.value)


@pytest.mark.parametrize("argv, says", [
    (["--samples", "10.5"], "argument --samples: '10.5': expected N or MODEL=N with N a positive integer"),
    (["--samples", "1e9"], "argument --samples: '1e9'"),
    (["--samples", str(MAX_SAMPLES + 1)], f"expected an integer from 1 to {MAX_SAMPLES:,}"),
    (["--samples", "widedeep=" + "9" * 5000], "argument --samples: 'widedeep=9999"),
    (["--samples", "+5"], "expected an integer written in digits, got '+5'"),
    (["--samples", "1_000"], "got '1_000'"),
    (["--samples", "\u0663"], "argument --samples"),  # an Arabic-Indic three: a digit to int(), not to the suite
    (["--samples", "resnet50=0"], "'resnet50=0': expected N or MODEL=N"),
    (["--shard", "3/2"], "argument --shard: --shard '3/2': expected 1 <= I <= N"),
    (["--shard", f"1/{MAX_SHARDS + 1}"], f"expected at most {MAX_SHARDS} shares"),
    (["--shard", "1/" + "9" * 5000], "argument --shard: '1/999"),
    (["--shard", "1.5/2"], "expected I/N with integers"),
    (["--shard", "\u0661/\u0662"], "argument --shard"),  # Arabic-Indic 1/2: digits to int() and to \\d
    (["--workers", "\u0663"], "argument --workers: '\u0663'"),
    (["--workers", "\uff13"], "argument --workers"),  # a fullwidth three
    (["--samples", "\u00b2"], "argument --samples"),  # a superscript two: isdigit() but not int()
    (["--report-dir", ""], "argument --report-dir: '' is not a path (empty)"),
    (["--baseline", " "], "argument --baseline: ' ' is not a path (empty)"),
    (["--checkpoint", "widedeep=a\0b"], "holds a NUL character"),
    (["--precision", "fp32,"], "argument --precision: 'fp32,' has an empty precision name"),
    (["--device", ""], "argument --device: '' is not a chip name"),
    (["--hardware", "tpu"], "argument --hardware: invalid choice: 'tpu'"),
    (["--workers", "0"], "argument --workers: '0': expected the number of local worker processes (expected an integer "
                         f"from 1 to {MAX_WORKERS}, got 0)"),
    (["--workers", str(MAX_WORKERS + 1)], f"from 1 to {MAX_WORKERS}, got {MAX_WORKERS + 1}"),
    (["--workers", "two"], "argument --workers: 'two': expected the number of local worker processes (expected an "
                           "integer written in digits"),
    (["--workers", "1.5"], "argument --workers: '1.5'"),
    (["--workers", "-2"], "argument --workers: '-2'"),
    (["--workers", "9" * 5000], "argument --workers: '9999"),
    (["--cluster", "localhost"], "argument --cluster: 'localhost': not a Dask scheduler address; expected "
                                 "[tcp://]HOST:PORT"),
    (["--cluster", "http://host:80"], "argument --cluster: 'http://host:80': not a Dask scheduler address"),
    (["--cluster", "host:70000"], "argument --cluster: 'host:70000': not a Dask scheduler address"),
])
def test_values_that_cannot_be_read_are_usage_errors_naming_the_option(argv, says, capsys):
    with pytest.raises(SystemExit) as exited:
        _settle(*argv)
    assert exited.value.code == 4
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("name, value, says", [
    (THREADS_VARIABLE, "0", "CONFORMANCE_THREADS='0' is not a positive integer"),
    (THREADS_VARIABLE, "1e3", "CONFORMANCE_THREADS='1e3' is not a positive integer"),
    (THREADS_VARIABLE, "100000", "CONFORMANCE_THREADS='100000' is more threads than any host's cores"),
    (THREADS_VARIABLE, "9" * 5000, "is not a positive integer"),
    (THREADS_VARIABLE, "\u0663", "CONFORMANCE_THREADS='\u0663' is not a positive integer written in digits 0-9"),
    (THREADS_VARIABLE, "\u00b2", "is not a positive integer"),
    (THREADS_VARIABLE, "1_0", "is not a positive integer"),
    (KERNELS_VARIABLE, "cuda", "CONFORMANCE_KERNELS='cuda' is not a kernel path; set it to one of: numba, numpy"),
])
def test_environment_variables_are_checked_naming_them(monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match="environment variable") as info:
        _settle()
    assert says in str(info.value)


def test_the_cache_directory_is_made_only_for_a_users_case(tmp_path):
    assert _settle("--cache-dir", str(tmp_path / "c")).cache_dir is None
    assert not (tmp_path / "c").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingsError, match="--cache-dir: cache directory .* is not a directory"):
        _settle("--dataset", f"widedeep={tmp_path}", "--cache-dir", str(tmp_path / "file"))


def test_the_engine_options_settle_and_keep_their_batches_in_a_writable_cache_directory(tmp_path):
    run = _settle("--workers", " 3 ", "--cache-dir", str(tmp_path / "c"))
    assert (run.workers, run.cluster, run.cache_dir) == (3, None, tmp_path / "c") and (tmp_path / "c").is_dir()
    run = _settle("--cluster", "node-3.cluster:8786")
    assert (run.workers, run.cluster) == (None, "tcp://node-3.cluster:8786")
    assert run.cache_dir == tmp_path / "cache"  # the default directory (the variable the fixture set), made
    assert _settle().workers is None and _settle().cluster is None
    (tmp_path / "file").write_text("")
    for engine in (["--workers", "2"], ["--cluster", "10.0.0.5:8786"]):
        with pytest.raises(SettingsError, match="--cache-dir: cache directory .* is not a directory"):
            _settle(*engine, "--cache-dir", str(tmp_path / "file"))


@pytest.mark.parametrize("processes", [2, "auto"])
def test_the_engine_options_refuse_pytest_xdist(processes):
    """Each -n process would start workers of its own: refused, naming both; -n 0 (no xdist processes) and a run
    without the engine options are fine."""
    with pytest.raises(SettingsError, match=rf"--workers 2 and pytest-xdist's -n {processes}: give one of them"):
        check_engine(_settle("--workers", "2"), processes)
    check_engine(_settle("--workers", "2"), 0)
    check_engine(_settle(), processes)


# -- any command line: a settings object, or a usage error ------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0/"), max_size=12)
_VALUES = st.one_of(
    _TEXT,
    st.integers(-10, 10 ** 25).map(str),
    st.tuples(st.integers(-3, 2000), st.integers(-3, 2000)).map(lambda pair: f"{pair[0]}/{pair[1]}"),
    st.sampled_from([*MODEL_NAMES, "minilm", "bert", "wide&deep", "fp16", "fp8", "fp32", "c600", "gc200", "ipu", "cpu",
                     "null", "smoke", "1e9", "10.5", "nan", "inf", "-0", ""]),
    st.tuples(st.sampled_from([*MODEL_NAMES, "gpt5", ""]), st.sampled_from(["", "=", "=="]), _TEXT)
    .map("".join),
)
_ARGUMENT = st.tuples(st.sampled_from([option for option in OPTIONS]), _VALUES)
_ENVIRONMENT = st.fixed_dictionaries({name: st.one_of(st.just(""), st.text(string.printable.replace("\0", ""),
                                                                                    max_size=6))
                                      for name in (THREADS_VARIABLE, KERNELS_VARIABLE)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=st.lists(_ARGUMENT, max_size=5), environment=_ENVIRONMENT)
def test_any_command_line_settles_or_is_a_usage_error(arguments, environment, monkeypatch, tmp_path):
    argv = []
    for option, value in arguments:
        if option.switch:
            argv.append(option.flag)
        elif option.flag in ("--report-dir", "--baseline", "--cache-dir", "--xfail-file"):
            argv += [option.flag, str(tmp_path / "in" / value) if value.strip() else value]
        elif option.flag in ("--checkpoint", "--dataset", "--calibration"):
            name, _, path = value.partition("=")
            argv += [option.flag, f"{name}={tmp_path / 'in' / path}" if path.strip() else value]
        else:
            argv += [option.flag, value]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    try:
        run = _settle(*argv)
    except SystemExit as exc:  # argparse: a value that cannot be read
        assert exc.code == 4
        return
    except (SettingsError, DataFileError) as exc:
        assert str(exc).strip()
        return
    assert run.hardware in hardware_names() and run.backend.name == run.hardware
    assert set(run.precisions) <= set(run.backend.precisions) and all(0 < n <= MAX_SAMPLES for n in run.samples.values())
    assert run.shard is None or 1 <= run.shard.index <= run.shard.count <= MAX_SHARDS
    assert run.workers is None or (1 <= run.workers <= MAX_WORKERS and run.cluster is None and run.cache_dir)
