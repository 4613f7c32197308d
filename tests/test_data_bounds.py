"""Numbers in the run-length and target files are integers where they count, finite, and within a range that means
something: a typo is refused with the file and key, never a run that cannot end or a gate that cannot fail."""

from __future__ import annotations

import pytest

from conformance.targets.performance import PerformanceTargetsError, load_performance_targets
from conformance.targets.profiles import PROFILES_FILE, ProfilesError, load_profiles


def edited(tmp_path, source, old: str, new: str):
    text = source.read_text()
    assert old in text, old
    path = tmp_path / source.name
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new, says", [
    ("min_duration_ms = 300", "min_duration_ms = 9223372036854775807", ("smoke.performance.min_duration_ms",
                                                                         "less than or equal to 3600000")),
    ("min_duration_ms = 300", "min_duration_ms = 300.5", ("smoke.performance.min_duration_ms", "integer")),
    ("min_duration_ms = 300", "min_duration_ms = true", ("smoke.performance.min_duration_ms", "integer")),
    ("sampling_target = 16", "sampling_target = 100000000000", ("smoke.audit.sampling_target", "1000000")),
    ("Server = 270336", "Server = 99999999999", ("full.performance.min_query_count", "10000000")),
])
def test_profiles_bounds(tmp_path, old, new, says):
    with pytest.raises(ProfilesError) as exc:
        load_profiles(edited(tmp_path, PROFILES_FILE, old, new))
    assert all(s in str(exc.value) for s in says), str(exc.value)


@pytest.mark.parametrize("old, new, says", [
    ("Offline = 24560", "Offline = inf", ("Offline", "finite")),
    ("Offline = 24560", "Offline = 1e10", ("Offline", "less than or equal to")),
    ("server_latency_ms = 60", "server_latency_ms = nan", ("server_latency_ms", "finite")),
    ("server_batch_timeout_ms = 2.0", "server_batch_timeout_ms = -1.0", ("server_batch_timeout_ms", "greater than or equal to 0")),
    ('mlperf_model = "dlrm-v2"', 'mlperf_model = "dlrm-v3"', ("mlperf_model", "'dlrm-v2'")),
])
def test_performance_bounds(edited_model_table, old, new, says):
    """In a model's own performance.toml (wide&deep's): the message names that file."""
    copy = edited_model_table("widedeep", "performance", old, new)
    with pytest.raises(PerformanceTargetsError) as exc:
        load_performance_targets()
    assert all(s in str(exc.value) for s in (str(copy), *says)), str(exc.value)
