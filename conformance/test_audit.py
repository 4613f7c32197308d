"""MLPerf compliance audits TEST01 and TEST04 on the performance targets of the hardware.

One test per performance target in a scenario an audit applies to (``conformance/targets/audit.toml``):
``test_audit[<model>-<precision>-<scenario>-TEST01]`` and ``...-TEST04]``. TEST01 records the fraction of sampled
performance-mode responses that equal the accuracy-mode ones; TEST04 the same-sample / reference score ratio. Models
MLPerf exempts from TEST04 are skipped with the reason. The logic is in :mod:`conformance.perf.audit`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conformance.perf.audit import audit_matrix, load_audit_config
from conformance.plugin import SETTINGS_KEY
from conformance.targets.performance import load_performance_targets


def pytest_generate_tests(metafunc):
    if "audit_case" not in metafunc.fixturenames:
        return
    settings = metafunc.config.stash[SETTINGS_KEY]
    config = load_audit_config()
    every, _ = audit_matrix(load_performance_targets().for_hardware(settings.hardware), config)
    assert every, f"no compliance audits for hardware {settings.hardware!r}: check performance.toml and audit.toml"
    precisions = settings.extra.get("precisions")
    models = config.models_for(settings.profile, settings.models)
    targets = load_performance_targets().for_hardware(settings.hardware, precisions, models)
    cases, exempt = audit_matrix(targets, config)
    params = [pytest.param(c, id=c.test_id) for c in cases]
    params += [pytest.param(None, id=test_id, marks=pytest.mark.skip(reason=f"MLPerf exempts it: {reason}"))
               for test_id, reason in exempt.items()]
    if not params:
        reason = (f"no audits for models {list(settings.models)} in profile {settings.profile!r} (audit.toml audits "
                  f"{list(config.models_for(settings.profile, every_model(every)))} there)")
        params = [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize("audit_case", params)


def every_model(cases) -> list[str]:
    return list(dict.fromkeys(c.target.model for c in cases))


@pytest.fixture(scope="session")
def accuracy_devices() -> dict:
    """TEST01's accuracy-mode devices, one per performance device: their answers are computed once, afresh, and shared
    by the scenarios of a model and precision."""
    return {}


def test_audit(audit_case, settings, backend, model_store, record_check, accuracy_devices):
    from conformance.perf import audit
    from conformance.perf.scenario_run import plan_target

    case, config = audit_case, load_audit_config()
    target = case.target
    plan = plan_target(target, settings.profile, model_store=model_store, backend=backend)
    if settings.report_dir is not None:
        log_dir = Path(settings.report_dir) / "loadgen" / case.test_id
    else:
        log_dir = Path(tempfile.mkdtemp(prefix=f"loadgen-{case.test_id}-"))
    common = {"hardware": target.hardware, "profile": settings.profile, "log_dir": str(log_dir)}
    if case.audit == "TEST01":
        twin = accuracy_devices.setdefault(id(plan.device), (plan.device, audit.fresh_answers(plan.device)))[1]
        samples = getattr(plan.device, "samples", None)
        result = audit.run_test01(
            plan.device, plan.settings, log_dir, sampling_target=config.sampling_target[settings.profile],
            rng_seed=config.accuracy_log_rng_seed, tolerance=config.accuracy_delta, accuracy_device=twin,
            score=audit.task_scorer(samples.model, samples) if samples is not None else None, **plan.run_options)
        record = record_check(kind="audit", model=target.model, precision=target.precision, check="TEST01",
                              value=result.value, target=1.0, op=">=", units=result.units,
                              scenario=target.scenario, passed=result.passed, details={**common, **result.details()})
    else:
        result = audit.run_test04(plan.device, plan.settings, log_dir, config=config, **plan.run_options)
        record = record_check(kind="audit", model=target.model, precision=target.precision, check="TEST04",
                              value=result.ratio, target=result.limit, op="<=", units="same-sample/reference score",
                              scenario=target.scenario, details={**common, **result.details()})
    reproduce = (f"pytest conformance/test_audit.py --hardware {target.hardware} --model {target.model} "
                 f"--profile {settings.profile} -k '{case.test_id}'")
    assert record.passed, f"{case.test_id}: {result.describe()}\nreproduce: {reproduce}"
