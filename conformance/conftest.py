"""Session fixtures shared by the conformance tests: settings, the hardware backend, and a cache of loaded models."""

from __future__ import annotations

import pytest

from conformance.datasets.user import UserCase
from conformance.hardware import Backend, get_backend
from conformance.plugin import SETTINGS_KEY, USER_CASES_KEY
from conformance.report.checks import RECORD_KEY, CheckRecord, plain
from conformance.settings import RunSettings
from conformance.targets import compare
from models import load_model
from models.seeds import WEIGHT_SEED


@pytest.fixture(scope="session")
def settings(pytestconfig) -> RunSettings:
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def backend(settings) -> Backend:
    return get_backend(settings.hardware, settings.device)


class ModelStore:
    """Loads each model once per session (seeded weights are large; building them twice wastes seconds); a user's
    checkpoint (``--checkpoint``) was loaded when the options were checked."""

    def __init__(self, user_cases: dict | None = None):
        self._models = {name: case.model for name, case in (user_cases or {}).items()}

    def get(self, name: str):
        if name not in self._models:
            self._models[name] = load_model(name, seed=WEIGHT_SEED)
        return self._models[name]


@pytest.fixture(scope="session")
def user_cases(pytestconfig) -> dict[str, UserCase]:
    """The models the user gave a checkpoint or data set for (``--checkpoint``, ``--dataset``)."""
    return pytestconfig.stash[USER_CASES_KEY]


@pytest.fixture(scope="session")
def model_store(user_cases) -> ModelStore:
    return ModelStore(user_cases)


@pytest.fixture
def record_check(request):
    """Record one gated figure of the current test: ``record_check(kind=..., model=..., precision=..., check=...,
    value=..., target=..., op=">=", units=..., scenario=None, gating=True, details={})``. Returns the CheckRecord;
    ``passed`` is computed from value, op and target. Every field is stored as plain JSON values (numpy numbers as
    Python ones, NaN as None), so that a record travels from a pytest-xdist worker as it is."""

    def record(**fields) -> CheckRecord:
        fields.setdefault("passed", compare(fields.get("value"), fields["op"], fields["target"]))
        fields = {key: plain(value, f"record_check {key}") for key, value in fields.items()}
        rec = CheckRecord(test_id=request.node.nodeid, **fields)
        request.node.user_properties.append((RECORD_KEY, rec.to_dict()))
        return rec

    return record
