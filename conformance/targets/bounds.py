"""Number types of the data files: integers that are integers, every number finite and within a range that means
something, so that a typo (``inf``, a 19-digit duration, ``10.9`` buckets) is refused when the file is read rather than
becoming a run that never ends or a check that cannot fail."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field


def count(upper: int, lower: int = 1):
    """An integer (not a float, not a boolean) from ``lower`` to ``upper``."""
    return Annotated[int, Field(ge=lower, le=upper, strict=True)]


def positive(upper: float):
    """A finite number above 0, at most ``upper``."""
    return Annotated[float, Field(gt=0, le=upper, allow_inf_nan=False)]


def non_negative(upper: float):
    """A finite number from 0 to ``upper``."""
    return Annotated[float, Field(ge=0, le=upper, allow_inf_nan=False)]


# The largest values each kind of figure may take.
MAX_DURATION_MS = 3_600_000  # a LoadGen run of an hour: six times MLPerf's 600 s
MAX_QUERIES = 10_000_000
MAX_SAMPLES = 1_000_000
MAX_BATCH = 1_000_000
MAX_RATE = 1e9  # samples/s
MAX_LATENCY_MS = 1e7
MIN_RATIO = 0.5  # an accuracy gate's ratio of a higher precision's figure: below half of it, it bounds almost nothing
MAX_REL_ALLOWANCE = 1.0  # a regression allowance as a share of the baseline: all of it lets a figure fall to 0
