"""Usage errors of the ``ipu-conformance`` command exit 4, as the main job's do (pytest's convention, 2 being an
interrupted run), for every subcommand and from the one parser class they share; ``--help`` exits 0."""

from __future__ import annotations

import pytest

from conformance.cli import EXIT_USAGE, SUBCOMMANDS, main


def _exit(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_the_usage_code_is_pytests():
    assert EXIT_USAGE == pytest.ExitCode.USAGE_ERROR == 4


# arguments each subcommand needs, so that the unknown option is the only mistake
REQUIRED = {"reference": ["verify"], "predict": ["widedeep", "--precision", "fp16", "--batch-size", "1"],
            "export": ["widedeep", "--out", "g.onnx"], "report": ["r.json"], "calibrate": [], "sensitivity": []}


def test_every_subcommand_is_covered():
    assert set(REQUIRED) == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_an_unknown_option_of_each_subcommand_exits_4_naming_it(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _exit([command, *REQUIRED[command], "--no-such-option"]) == 4
    err = capsys.readouterr().err
    assert f"ipu-conformance {command}: error: " in err and "--no-such-option" in err


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_help_of_each_subcommand_exits_0(command, capsys):
    assert _exit([command, "--help"]) == 0
    assert f"usage: ipu-conformance {command}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    ([], "the following arguments are required: COMMAND"),
    (["nope"], "invalid choice: 'nope'"),
    (["reference", "regenerate"], "argument action: invalid choice: 'regenerate'"),
    (["reference", "verify", "--model", "gpt5"], "unknown model 'gpt5'"),
    (["predict", "widedeep", "--precision", "fp16"], "the following arguments are required: --batch-size"),
    (["predict", "widedeep", "--precision", "fp16", "--batch-size", "1e3"], "expected an integer"),
    (["export", "widedeep"], "the following arguments are required: --out"),
    (["report"], "the following arguments are required: RESULTS_JSON"),
    (["report", "r.json", "--format", "pdf"], "invalid choice: 'pdf'"),
    (["sensitivity", "--profile", "huge"], "--profile 'huge': unknown"),
    (["calibrate", "--write", "extra"], "unrecognized arguments: extra"),
])
def test_bad_usage_exits_4(argv, says, capsys):
    assert _exit(argv) == 4
    assert says in capsys.readouterr().err


def test_help_and_version_exit_0(capsys):
    assert _exit(["--help"]) == 0
    assert _exit(["--version"]) == 0
    assert "ipu-conformance" in capsys.readouterr().out


def test_the_help_names_every_profile_of_the_main_job(capsys):
    from conformance.targets.profiles import PROFILE_NAMES, RELEASE_PROFILE

    assert _exit(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"[--profile {'|'.join(PROFILE_NAMES)}]" in out and f"at --profile {RELEASE_PROFILE}" in out
