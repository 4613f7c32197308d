"""Hostile values on the suite's input surfaces: the options of the main job, its environment variables, a cluster's
address, the counts of the ``predict`` command and a model's ``--set`` config fields, each given text an attacker would
try (other scripts' digits, fullwidth and superscript digits, ``_`` separators, signs, exponents, blanks of every kind,
control and format characters, very long runs). The rule, for every value: it is read as what it is, or it is a usage
error naming the input; never a traceback, never a hang (a per-example deadline).

"Read as what it is" has an oracle independent of the code under test: a count is accepted only when its text is ASCII
digits (blanks around them aside) and then means the integer those digits write.

The surfaces are driven in this process through the same parsing functions the command lines use (argparse's types,
the settings' checks), so that many examples cost little; one run of pytest in a subprocess shows the whole path to
exit 4. Hypothesis runs derandomized (the same examples on every machine)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conformance.cli.predict import _bounded_int
from conformance.distributed import EngineError, check_address
from conformance.numerics.compiled import KERNEL_PATHS, KERNELS_VARIABLE
from conformance.settings import ENVIRONMENT, OPTIONS, SettingsError
from conformance.settings.options import MAX_SHARDS, MAX_WORKERS, THREADS_VARIABLE, check_environment
from models import bert
from models.base import apply_overrides
from tests.test_settings import _parser

REPO = Path(__file__).resolve().parents[1]
PROPERTY = settings(max_examples=120, deadline=timedelta(seconds=5), database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
ASCII_COUNT = re.compile(r"[0-9]+", re.ASCII)
_parser()  # the registry's backends loaded once here, not within an example's deadline

# digits that are not ASCII: Arabic-Indic, Devanagari, fullwidth, mathematical bold, superscripts, circled, fractions
_LOOKALIKES = "\u0660\u0663\u0669\u0966\u0969\uff10\uff13\U0001d7ce\U0001d7d1\u00b2\u00b3\u00b9\u2070\u2460\u00bd"
_BLANKS = " \t\n\u00a0\u2009\u3000\u200b\u200e\u202e\ufeff"  # spaces, zero-width and direction marks, a BOM
_HOSTILE_CHAR = st.one_of(st.sampled_from("0123456789"), st.sampled_from(_LOOKALIKES), st.sampled_from(_BLANKS),
                          st.sampled_from("+-_.,eE/=:x%#\\'\""),
                          st.characters(categories=("Nd", "No", "Zs", "Cf", "Cc"), exclude_characters="\0"))
HOSTILE = st.one_of(
    st.text(_HOSTILE_CHAR, min_size=1, max_size=10),
    st.integers(-5, 10 ** 25).map(str),
    st.tuples(st.integers(0, 3), st.text(st.sampled_from("0123456789" + _LOOKALIKES), min_size=1, max_size=6))
    .map(lambda pair: " " * pair[0] + pair[1]),
    st.sampled_from(["9" * 5000, "1" + "0" * 40, "0x10", "1e3", "nan", "-0", "+3", "3_0", "٣", "１", "²"]),
)


def _as_written(text: str) -> int | None:
    """The count ``text`` writes as the oracle reads it: ASCII digits, blanks around them aside (None otherwise)."""
    stripped = text.strip(" \t\n\r\x0b\x0c")
    return int(stripped) if ASCII_COUNT.fullmatch(stripped) and len(stripped) <= 20 else None


def _parse(flag: str, value: str):
    """``flag value`` read by the main job's argparse arguments: (the parsed value, None) or (None, what it said on
    exiting with a usage error)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parsed = vars(_parser().parse_args([flag, value]))
        except SystemExit as exc:
            assert exc.code == 4, err.getvalue()
            return None, err.getvalue()
    return parsed[next(o.dest for o in OPTIONS if o.flag == flag)], None


@contextlib.contextmanager
def _environment(name: str, value: str):
    """``name=value`` in this process's environment for the block (the other variables of the suite unset)."""
    saved = {key: os.environ.get(key) for key in ENVIRONMENT}
    for key in ENVIRONMENT:
        os.environ.pop(key, None)
    os.environ[name] = value
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


# -- options ----------------------------------------------------------------------------------------------------------

@PROPERTY
@given(value=HOSTILE)
@example(value="\u0663")
@example(value="\uff12")
def test_workers_is_a_count_written_in_ascii_digits_or_a_usage_error_naming_it(value):
    parsed, said = _parse("--workers", value)
    count = _as_written(value)
    if count is not None and 1 <= count <= MAX_WORKERS:
        assert parsed == count, (value, parsed, said)
    else:
        assert parsed is None and "argument --workers" in said, (value, parsed)
        assert "Traceback" not in said


@PROPERTY
@given(value=HOSTILE, model=st.sampled_from(["", "widedeep=", "resnet50="]))
@example(value="\u0663", model="")
def test_samples_is_a_count_written_in_ascii_digits_or_a_usage_error_naming_it(value, model):
    parsed, said = _parse("--samples", model + value)
    count = _as_written(value)
    if parsed is None:
        assert "argument --samples" in said and "Traceback" not in said
    else:
        assert count is not None and parsed[-1][1] == count, (value, parsed)  # --samples may be given again


@PROPERTY
@given(index=HOSTILE, count=HOSTILE)
@example(index="\u0661", count="\u0662")
def test_shard_is_two_counts_written_in_ascii_digits_or_a_usage_error_naming_it(index, count):
    parsed, said = _parse("--shard", f"{index}/{count}")
    i, n = _as_written(index), _as_written(count)
    if i is not None and n is not None and 1 <= i <= n <= MAX_SHARDS:
        assert (parsed.index, parsed.count) == (i, n), (index, count, parsed)
    else:
        assert parsed is None and "argument --shard" in said and "Traceback" not in said, (index, count, parsed)


@PROPERTY
@given(host=st.sampled_from(["127.0.0.1", "node-3", "[::1]", "h\u0663st", "\uff11\uff12\uff17.0.0.1"]),
       scheme=st.sampled_from(["", "tcp://", "tls://", "http://", "tcp:/"]), port=HOSTILE)
@example(host="127.0.0.1", scheme="tcp://", port="\u0668\u0667\u0668\u0666")
def test_a_cluster_address_is_ascii_with_a_port_written_in_digits_or_a_usage_error_naming_it(host, scheme, port):
    address = f"{scheme}{host}:{port}"
    parsed, said = _parse("--cluster", address)
    number = _as_written(port)
    if parsed is None:
        assert "argument --cluster" in said and "not a Dask scheduler address" in said and "Traceback" not in said
        with pytest.raises(EngineError, match="--cluster"):
            check_address(address)
    else:
        assert parsed.isascii() and number is not None and 0 < number < 65536, (address, parsed)
        assert parsed == f"{scheme or 'tcp://'}{host}:{number}"


@PROPERTY
@given(option=st.sampled_from([o for o in OPTIONS if o.parse is not None and o.flag not in
                               ("--report-dir", "--baseline", "--cache-dir", "--xfail-file", "--checkpoint",
                                "--dataset", "--calibration", "--onnx")]),
       value=HOSTILE)
def test_any_hostile_value_of_an_option_is_read_or_a_usage_error_naming_the_option(option, value):
    """The options whose values are names or counts (those that name files are driven by the settings' property)."""
    parsed, said = _parse(option.flag, value)
    if parsed is None:
        assert f"argument {option.flag}" in said and "Traceback" not in said, said


# -- environment variables --------------------------------------------------------------------------------------------

@PROPERTY
@given(name=st.sampled_from(sorted(ENVIRONMENT)), value=HOSTILE)
@example(name=THREADS_VARIABLE, value="\u0663")
@example(name=THREADS_VARIABLE, value="\u00b2")
def test_an_environment_variable_is_read_as_written_or_a_usage_error_naming_it(name, value):
    with _environment(name, value):
        try:
            check_environment()
        except SettingsError as exc:
            assert f"environment variable {name}=" in str(exc), str(exc)
            accepted = False
        else:
            accepted = True
    if name == THREADS_VARIABLE and accepted:
        count = _as_written(value)
        assert count is not None and count >= 1, value
    if name == KERNELS_VARIABLE and accepted:
        assert value in KERNEL_PATHS, value


# -- the predict command's counts and a model's config fields ---------------------------------------------------------

@PROPERTY
@given(value=HOSTILE)
@example(value="\u0663")
def test_a_count_of_the_predict_command_is_read_as_written_or_refused(value):
    number = value.strip(" \t\n\r\x0b\x0c")
    sign = number[:1] in "+-" and len(number) > 1
    written = (-1 if number[:1] == "-" else 1) * _as_written(number[1:]) if sign and _as_written(number[1:]) \
        is not None else _as_written(number)
    try:
        parsed = _bounded_int(1, 10 ** 6)(value)
    except argparse.ArgumentTypeError as exc:
        assert str(exc)
        assert written is None or not 1 <= written <= 10 ** 6, (value, str(exc))
    else:
        assert parsed == written, (value, parsed)


@PROPERTY
@given(value=HOSTILE)
@example(value="\u0661\u0662\u0668")
def test_a_config_field_given_as_text_is_read_as_written_or_refused_naming_it(value):
    try:
        config = apply_overrides(bert.BertConfig(), {"seq_len": value})
    except (ValueError, TypeError) as exc:
        assert "seq_len" in str(exc), str(exc)
    else:
        assert config.seq_len == _as_written(value.lstrip("+")) or config.seq_len == int(value.strip()), value
        assert value.strip().lstrip("+-").isascii() and value.strip().lstrip("+-").isdigit(), value


# -- the whole path, once ---------------------------------------------------------------------------------------------

def test_a_run_given_a_count_in_other_digits_stops_before_any_test_with_exit_4(tmp_path):
    env = {**os.environ, THREADS_VARIABLE: "\u0663"}
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--hardware", "cpu", "--model", "widedeep",
                           "--profile", "smoke", "--report-dir", str(tmp_path / "report"), "-p", "no:randomly"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 4, out[-3000:]
    assert f"{THREADS_VARIABLE}='\u0663'" in out and "Traceback" not in out
    assert "passed" not in done.stdout and "failed" not in done.stdout
