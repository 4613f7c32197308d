"""The pytest plugin: options appear in --help with their defaults, bad choices are usage errors listing valid ones."""

from __future__ import annotations

import pytest

from conformance.hardware import hardware_names
from conformance.settings import OPTIONS
from models import MODEL_NAMES


@pytest.fixture
def run(pytester):
    def run(*args):
        return pytester.runpytest_subprocess(*args)

    return run


def test_help_shows_options_and_defaults(run):
    result = run("--help")
    assert result.ret == 0
    out = result.stdout.str()
    for option in OPTIONS:  # the help is generated from the settings' table: every option, with its metavar
        assert option.flag + (f"={option.metavar}" if option.metavar else "") in out
    assert "IPU conformance suite" in out
    assert "(default: cpu)" in out
    assert "(default: default)" in out


def test_unknown_hardware_is_usage_error_listing_choices(run):
    result = run("--hardware", "tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "tpu" in err
    for name in hardware_names():
        assert name in err


def test_unknown_model_is_usage_error_listing_choices(run):
    result = run("--model", "gpt5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "unknown model 'gpt5'" in err
    for name in MODEL_NAMES:
        assert name in err


def test_unknown_model_in_comma_list(run):
    result = run("--model", "resnet50,gpt5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "gpt5" in result.stderr.str()


def test_unknown_profile_is_usage_error(run):
    result = run("--profile", "huge")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "smoke" in result.stderr.str()


def test_header_shows_settings(pytester):
    pytester.makepyfile("def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("--model", "resnet50-v1.5,wide&deep", "--model", "bert", "--profile", "smoke")
    assert result.ret == 0
    out = result.stdout.str()
    assert "hardware=cpu" in out
    assert "profile=smoke, models=resnet50,widedeep,bert-base" in out
    assert "versions python=" in out
