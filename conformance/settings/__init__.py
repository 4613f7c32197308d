"""The main job's configuration, in one place: every option and environment variable is declared, parsed, typed and
checked once (:mod:`.options`), settling into one immutable :class:`RunSettings` that makes the run's backend
(:mod:`.run`); :mod:`.checks` holds the settings against the suite's data files and :mod:`.session` is how the hooks
and the suites read them during a pytest run."""

from __future__ import annotations

from conformance.settings.options import ENVIRONMENT, OPTIONS, Option, SettingsError, settle
from conformance.settings.run import RunSettings

__all__ = ["ENVIRONMENT", "OPTIONS", "Option", "RunSettings", "SettingsError", "settle"]
