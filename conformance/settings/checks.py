"""The run's settings against the suite's data files, before any test runs: every file the run reads is valid, every
model and precision the hardware runs has its accuracy gates, and every performance target is one the backend can
run. A mistake is a :class:`~conformance.datafiles.DataFileError` naming the file (a usage error). The engine of
``--workers`` / ``--cluster`` is checked against how pytest runs (:func:`check_engine`): a cluster that does not answer
or runs other sources is a :class:`~conformance.settings.options.SettingsError` before any test."""

from __future__ import annotations

from conformance import distributed, hardware
from conformance.settings.options import SettingsError
from conformance.settings.run import RunSettings
from conformance.targets import DataFileError
from conformance.targets import accuracy as accuracy_targets
from conformance.targets.audit import load_audit_config
from conformance.targets.label_floors import load_label_floors
from conformance.targets import performance as performance_targets
from conformance.targets.performance import PERFORMANCE_FILE, load_performance_targets
from conformance.targets.profiles import load_profiles
from conformance.targets.regression import load_tolerances


class NotRunnable(DataFileError):
    """A data file that does not fit the run (a performance target in a scenario the backend cannot run)."""


def check_data_files() -> None:
    """Load (and so validate) the suite's data files a run reads; the backend's own are validated by its constructor,
    the performance targets by :func:`check_targets_runnable`."""
    load_profiles()
    load_audit_config()
    load_tolerances()
    load_label_floors()


def check_targets_runnable(settings: RunSettings) -> None:
    """Every performance target of the run is one the backend can run (a scenario it supports)."""
    try:
        targets = load_performance_targets().for_hardware(settings.hardware, settings.precisions, settings.models)
    except ValueError as exc:  # a targets file that is not valid names itself
        raise NotRunnable(str(exc)) from None
    counts = settings.profile_data.performance.min_query_count
    if targets and settings.hardware not in counts:
        raise NotRunnable(f"profile {settings.profile!r} has no LoadGen query counts for hardware {settings.hardware!r}, "
                          f"which has performance targets: add [profiles.{settings.profile}].min_query_count to its "
                          f"backend's {PERFORMANCE_FILE.name} (or [{settings.profile}.performance].min_query_count."
                          f"{settings.hardware} to the suite's profiles.toml), or run another profile")
    for target in targets:
        if settings.backend.chip_support(target.precision):
            continue  # a precision the chosen chip lacks: its tests are skipped with the reason
        reason = settings.backend.scenario_support(target.model, target.precision, target.scenario)
        if reason:
            raise NotRunnable(f"performance target {target.test_id} of hardware {settings.hardware!r} cannot "
                                    f"run: {reason} (targets: {PERFORMANCE_FILE.name} of the model or of the backend)")


def check_runnable(settings: RunSettings) -> None:
    reason = hardware.unavailable(settings.backend)
    if reason:
        raise SettingsError(f"--hardware {settings.hardware}: {reason}")
    check_data_files()
    accuracy_targets.check_complete(settings.backend, settings.models)
    performance_targets.check_complete(settings.backend, settings.models, settings.precisions)
    check_targets_runnable(settings)


def check_engine(settings: RunSettings, processes=None) -> None:
    """``--workers`` and ``--cluster`` against pytest-xdist's ``-n`` (``processes``: each of its processes would
    start workers of its own), and a ``--cluster`` that answers with workers running this suite's sources and BLAS
    and able to compute on ``--array`` (connected to once, here; the accuracy tests connect again). Local workers
    share this machine's packages and devices, which ``--array`` was checked against."""
    if settings.workers is None and settings.cluster is None:
        return
    given = f"--workers {settings.workers}" if settings.workers is not None else f"--cluster {settings.cluster}"
    if processes not in (None, 0, "0"):
        raise SettingsError(f"{given} and pytest-xdist's -n {processes}: give one of them; each -n process would start "
                            f"workers of its own (use {given.split()[0]} alone to spread the accuracy batches, or -n "
                            "alone to spread whole tests)")
    if settings.cluster is not None:
        try:  # Dask is imported here, only for a cluster
            distributed.DaskEngine(address=settings.cluster, array=settings.array).close()
        except distributed.EngineError as exc:
            raise SettingsError(str(exc)) from None
