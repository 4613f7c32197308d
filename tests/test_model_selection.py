"""``--model`` selects the MiniLM case only when asked: ``minilm`` is a choice of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest


def collected(*model_args) -> list[str]:
    result = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--hardware", "ipu", "--profile", "smoke",
                             *model_args, "--co", "-q", "-p", "no:cacheprovider"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("args, minilm, widedeep", [
    (("--model", "widedeep"), False, True),
    (("--model", "minilm"), True, False),
    (("--model", "widedeep,minilm"), True, True),
    ((), True, True),
])
def test_minilm_runs_only_when_selected(args, minilm, widedeep):
    ids = collected(*args)
    assert any("test_minilm" in i for i in ids) == minilm, ids
    assert any("widedeep" in i for i in ids) == widedeep, ids
