"""``--samples all``: the whole of a user's data set (``--dataset``), a usage error naming the models it would apply to
without one; beside a global N it leaves the data set uncapped and caps the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.datasets.user import load_cases
from conformance.settings.options import SettingsError
from tests.test_dataset_criteo import criteo_lines
from tests.test_settings import _settle, clean_environment  # noqa: F401 - the environment fixture, applied here too

REPO = Path(__file__).resolve().parents[1]
ROWS = 12


@pytest.fixture
def criteo(tmp_path) -> Path:
    path = tmp_path / "day_23.tsv"
    path.write_text("\n".join(criteo_lines(ROWS)) + "\n")
    return path


@pytest.mark.parametrize("argv, says", [
    (["--model", "resnet50", "--samples", "all"],
     "--samples all: all means the whole of a user's data set, and resnet50 has none; give --dataset resnet50=PATH, "
     "or a number of synthetic samples (--samples resnet50=N; default: the profile's)"),
    (["--model", "resnet50,bert-base", "--samples", "all"],
     "and resnet50, bert-base have none; give --dataset MODEL=PATH, or a number of synthetic samples (--samples "
     "MODEL=N"),
    (["--model", "resnet50,widedeep", "--samples", "32", "--samples", "resnet50=all"],
     "--samples resnet50=all: all means the whole of a user's data set, and resnet50 has none"),
    (["--model", "widedeep", "--samples", "all", "--samples", "all"], "--samples N given more than once"),
])
def test_all_without_a_data_set_is_a_usage_error_naming_the_model(argv, says):
    with pytest.raises(SettingsError) as info:
        _settle(*argv)
    assert says in str(info.value)


@pytest.mark.parametrize("value", ["ALL", "al", "widedeep=every", "all=3"])
def test_what_is_neither_a_count_nor_all_is_refused(value):
    with pytest.raises(SystemExit) as exited:
        _settle("--samples", value)
    assert exited.value.code == 4


@pytest.mark.parametrize("models, samples, caps, units", [
    ("widedeep", [], {}, ROWS),  # a data set without --samples: the whole of it
    ("widedeep", ["--samples", "5"], {"*": 5}, 5),
    ("widedeep", ["--samples", "all"], {}, ROWS),
    ("widedeep", ["--samples", "widedeep=all"], {}, ROWS),
    ("widedeep,resnet50", ["--samples", "5", "--samples", "widedeep=all"], {"resnet50": 5}, ROWS),  # N caps the other
    ("widedeep,resnet50", ["--samples", "all", "--samples", "resnet50=7"], {"resnet50": 7}, ROWS),
])
def test_all_runs_the_whole_data_set(criteo, models, samples, caps, units):
    run = _settle("--model", models, "--dataset", f"widedeep={criteo}", *samples)
    assert run.samples == caps
    cases = load_cases(run.models, {}, run.datasets, run.samples)
    assert list(cases) == ["widedeep"] and cases["widedeep"].evaluation.units == units


def test_the_main_job_exits_4_before_any_test(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--hardware", "cpu", "--model", "resnet50",
                           "--samples", "all", "-p", "no:cacheprovider", "-q"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--samples all: all means the whole of a user's data set, and resnet50 has none" in done.stdout + done.stderr
