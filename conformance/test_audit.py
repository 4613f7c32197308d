"""MLPerf compliance audits TEST01 and TEST04 on the performance targets of the hardware.

One test per performance target in a scenario an audit applies to (``conformance/targets/audit.toml``):
``test_audit[<model>-<precision>-<scenario>-TEST01]`` and ``...-TEST04]``. TEST01 records the fraction of sampled
performance-mode responses that equal the accuracy-mode ones; TEST04 the same-sample / reference score ratio. Models
MLPerf exempts from TEST04 are skipped with the reason. The logic is in :mod:`conformance.perf.test01` and
:mod:`conformance.perf.test04`.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

from conformance.perf.audits import audit_matrix
from conformance.perf.scenario_run import plan_target
from conformance.perf.test01 import run_test01, task_scorer
from conformance.perf.test04 import run_test04
from conformance.settings.session import run_settings
from conformance.targets.audit import load_audit_config
from conformance.targets.performance import load_performance_targets


def pytest_generate_tests(metafunc):
    if "audit_case" not in metafunc.fixturenames:
        return
    settings = run_settings(metafunc.config)
    config = load_audit_config()
    every, _ = audit_matrix(load_performance_targets().for_hardware(settings.hardware), config)
    audited = settings.profile_data.audit
    models = audited.models_for(settings.models)
    targets = load_performance_targets().for_hardware(settings.hardware, settings.precisions, models)
    cases, exempt = audit_matrix(targets, config)
    params = [pytest.param(c, id=c.test_id) for c in cases]
    params += [pytest.param(None, id=test_id, marks=pytest.mark.skip(reason=f"MLPerf exempts it: {reason}"))
               for test_id, reason in exempt.items()]
    if not params and not every:
        reason = f"no performance targets of hardware {settings.hardware!r} in a scenario audit.toml audits"
        params = [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))]
    elif not params:
        reason = (f"no audits for models {list(settings.models)} in profile {settings.profile!r} (profiles.toml audits "
                  f"{list(audited.models_for(every_model(every)))} there)")
        params = [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize("audit_case", params)


def every_model(cases) -> list[str]:
    return list(dict.fromkeys(c.target.model for c in cases))


@pytest.fixture(scope="session")
def accuracy_devices() -> dict:
    """TEST01's accuracy-mode devices, one per performance device: their answers are computed once, afresh, and shared
    by the scenarios of a model and precision."""
    return {}


def report_paths(settings, details: dict) -> dict:
    """The audit's details with its runs' log directories relative to the report directory."""
    return {k: settings.published_path(v, relative=True) if k.endswith("_log_dir") and v else v
            for k, v in details.items()}


def test_audit(audit_case, settings, backend, model_store, record_check, accuracy_devices):
    case, config = audit_case, load_audit_config()
    target = case.target
    reason = backend.audit_support(target.model, target.precision, case.audit)
    if reason:
        pytest.skip(reason)
    plan = plan_target(target, settings.profile, backend, model_store.get(target.model),
                       real_time=settings.real_time_loadgen)
    if settings.report_dir is not None:
        log_dir = Path(settings.report_dir) / "loadgen" / case.test_id
    else:
        log_dir = Path(tempfile.mkdtemp(prefix=f"loadgen-{case.test_id}-"))
    common = {"hardware": target.hardware, "profile": settings.profile, "log_dir": settings.published_path(log_dir, relative=True),
              "timing": backend.timing, "timing_model": backend.timing_model(), "clock": plan.clock}
    if case.audit == "TEST01":
        twin = accuracy_devices.setdefault(id(plan.device), (plan.device, plan.device.fresh()))[1]
        samples = plan.device.samples
        result = run_test01(
            plan.device, plan.settings, log_dir, sampling_target=settings.profile_data.audit.sampling_target,
            rng_seed=config.accuracy_log_rng_seed, tolerance=config.accuracy_delta, accuracy_device=twin,
            config=config, runner=plan.runner, warmup=plan.clock == "real",
            score=task_scorer(samples.model, samples) if samples is not None else None, **plan.run_options)
        record = record_check(kind="audit", model=target.model, precision=target.precision, check="TEST01",
                              value=result.verdict_value, target=1.0, op=">=",
                              units="1 = TEST PASS (verify_accuracy.py, verify_performance.py, every byte)",
                              scenario=target.scenario, established=result.established,
                              details={**common, **report_paths(settings, result.details())})
        bound = "every sampled response byte-equal, verify_accuracy.py and verify_performance.py TEST PASS"
    else:
        result = run_test04(plan.device, plan.settings, log_dir, config=config, runner=plan.runner,
                            warmup=plan.clock == "real", **plan.run_options)
        record = record_check(kind="audit", model=target.model, precision=target.precision, check="TEST04",
                              # verify_performance.py passes below the bound: the largest float under it, for "<="
                              value=result.gated_ratio, target=math.nextafter(result.limit, 0.0), op="<=",
                              units="same-sample/reference score", scenario=target.scenario,
                              established=result.established,
                              details={**common, **report_paths(settings, result.details())})
        bound = f"same-sample/reference score < {result.limit:g}, verify_performance.py TEST PASS"
    if not record.passed:
        reproduce = (f"pytest conformance/test_audit.py --hardware {target.hardware} --model {target.model} "
                     f"--profile {settings.profile} -k '{case.test_id}'")
        pytest.fail(f"{case.test_id}: {case.audit} failed: value {record.value} [{record.units}] (needs {bound})\n"
                    f"{result.describe()}\nlogs: {settings.published_path(log_dir)}\nreproduce: {reproduce}", pytrace=False)
