"""pytest plugin of the conformance suite: command-line options and hooks only; the logic lives in plain modules."""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import pytest

from conformance.hardware import HARDWARE_NAMES
from conformance.settings import PROFILE_NAMES, RunSettings

SETTINGS_KEY = pytest.StashKey[RunSettings]()


def _model_names(value: str) -> list[str]:
    """argparse type of ``--model``: one name or a comma list, each a known model or alias."""
    from models import canonical_name

    names = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            names.append(canonical_name(part))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "IPU conformance suite")
    group.addoption(
        "--hardware",
        choices=HARDWARE_NAMES,
        default="cpu",
        help="hardware backend to test: %(choices)s (default: %(default)s)",
    )
    group.addoption(
        "--model",
        action="append",
        type=_model_names,
        default=[],
        metavar="NAME[,NAME...]",
        help="model(s) to run, repeatable or a comma list (default: all six)",
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


def pytest_configure(config: pytest.Config) -> None:
    from models import MODEL_NAMES

    chosen = [name for group in config.getoption("model") for name in group]
    models = tuple(dict.fromkeys(chosen)) if chosen else MODEL_NAMES
    config.stash[SETTINGS_KEY] = RunSettings(
        hardware=config.getoption("hardware"),
        models=models,
        profile=config.getoption("profile"),
        report_dir=config.getoption("report_dir"),
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    import numpy

    from conformance.hardware import get_backend

    settings = config.stash[SETTINGS_KEY]
    backend = get_backend(settings.hardware)
    versions = {"python": platform.python_version(), "numpy": numpy.__version__, **backend.versions()}
    return [
        f"conformance: hardware={settings.hardware} ({backend.description}), precisions={','.join(backend.precisions)}",
        f"conformance: profile={settings.profile}, models={','.join(settings.models)}",
        "conformance: versions " + ", ".join(f"{k}={v}" for k, v in versions.items()),
    ]
