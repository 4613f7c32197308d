"""Session fixtures shared by the conformance tests: settings, the run's hardware backend, the user's cases, a progress
line on the terminal, and a cache of loaded models."""

from __future__ import annotations

import time

import pytest

from conformance.datasets.user import UserCase
from conformance.hardware import Backend
from conformance.report.checks import RECORD_KEY, CheckRecord, plain
from conformance.settings import RunSettings, session
from conformance.targets import compare
from models import load_model, seeded_weights_kept
from models.seeds import WEIGHT_SEED


@pytest.fixture(scope="session")
def settings(pytestconfig) -> RunSettings:
    return session.run_settings(pytestconfig)


@pytest.fixture(scope="session")
def backend(settings, pytestconfig) -> Backend:
    notice = settings.backend.start_up()
    if notice:  # said before the work starts, not charged silently to the first test
        session.progress_line(pytestconfig, notice)
    return settings.backend


@pytest.fixture(scope="session")
def progress(pytestconfig):
    """``progress(message)``: one line on the terminal (a long accuracy run says which model it is on)."""
    return lambda message: session.progress_line(pytestconfig, message)


class ModelStore:
    """Loads each model once per session (seeded weights are large; building them twice wastes seconds); a user's
    checkpoint (``--checkpoint``) was loaded when the options were checked. Building a model's weights is start-up
    work, not the test's: ``announce`` says when it starts, and what was built or read and how long it took."""

    def __init__(self, user_cases: dict | None = None, announce=None):
        self._models = {name: case.model for name, case in (user_cases or {}).items()}
        self._announce = announce

    def get(self, name: str):
        if name not in self._models:
            kept = seeded_weights_kept(name, seed=WEIGHT_SEED)
            if self._announce is not None and not kept:  # said before: building takes up to minutes
                self._announce(f"{name}: building the seeded weights (once per machine: the cache keeps them)")
            start = time.perf_counter()
            self._models[name] = load_model(name, seed=WEIGHT_SEED)
            if self._announce is not None:
                how = "read from the cache" if kept else "built"
                self._announce(f"{name}: seeded weights {how} in {time.perf_counter() - start:.1f} s")
        return self._models[name]


@pytest.fixture(scope="session")
def user_cases(pytestconfig, settings) -> dict[str, UserCase]:
    """The models the user gave a checkpoint or data set for (``--checkpoint``, ``--dataset``), and the graphs of
    ``--onnx`` (:class:`~conformance.graphs.case.GraphCase`, judged the same way)."""
    return {**session.user_cases(pytestconfig), **settings.onnx}


@pytest.fixture(scope="session")
def model_store(user_cases, pytestconfig) -> ModelStore:
    return ModelStore(user_cases, announce=lambda message: session.progress_line(pytestconfig, message))


@pytest.fixture
def record_check(request):
    """Record one gated figure of the current test: ``record_check(kind=..., model=..., precision=..., check=...,
    value=..., target=..., op=">=", units=..., scenario=None, gating=True, details={})``. Returns the CheckRecord;
    ``passed`` is computed from value, op and target. Every field is stored as plain JSON values (numpy numbers as
    Python ones, NaN as None), so that a record travels from a pytest-xdist worker as it is."""

    def record(**fields) -> CheckRecord:
        fields.setdefault("passed", compare(fields.get("value"), fields["op"], fields["target"]))
        array = session.run_settings(request.config).array  # the array library that computed the figure
        fields["details"] = {**(fields.get("details") or {}), "array": array}
        fields = {key: plain(value, f"record_check {key}") for key, value in fields.items()}
        rec = CheckRecord(test_id=request.node.nodeid, **fields)
        request.node.user_properties.append((RECORD_KEY, rec.to_dict()))
        return rec

    return record


def _judged(item) -> tuple[str, str, str, str | None, str] | None:
    """(kind, model, precision, scenario, check) of the case a test judges, from its parameters; None for a test
    that judges no model case (the reference tests, a placeholder of an empty matrix)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    target = params.get("performance_target")
    if target is not None:
        return "performance", target.model, target.precision, target.scenario, "error"
    case = params.get("audit_case")
    if case is not None:
        return "audit", case.target.model, case.target.precision, case.target.scenario, f"{case.audit}_error"
    case = params.get("accuracy_case")
    if case is not None:
        return "accuracy", case[0], case[1], None, "error"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that raised without a failing gated record of its own (an error of the suite, the backend or the
    device, not a gate) leaves one: ``error``, 1 error against 0, with the exception, so that the verdict matrix and
    the report show the case failed rather than a cell of its earlier passing checks or none."""
    excinfo = call.excinfo
    if (excinfo is not None and call.when in ("setup", "call")
            and not excinfo.errisinstance((pytest.skip.Exception, pytest.xfail.Exception))):
        records = [dict(v) for k, v in item.user_properties if k == RECORD_KEY]
        judged = _judged(item)
        if judged is not None and not any(r.get("gating", True) and not r.get("passed") for r in records):
            kind, model, precision, scenario, check = judged
            error = f"{excinfo.typename}: {excinfo.value}".strip()
            record = CheckRecord(test_id=item.nodeid, kind=kind, model=model, precision=precision, scenario=scenario,
                                 check=check, value=1, target=0, op="<=", passed=False, units="errors",
                                 details={"error": error[:2000], "phase": call.when})
            item.user_properties.append((RECORD_KEY, plain(record.to_dict(), "error record")))
    yield
