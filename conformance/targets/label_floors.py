"""Floors of the label gates as data (``label_floors.toml``): the FP32 score on a user's labels at or below which a
label gate's ``ratio x FP32`` bounds nothing, so that the gate is recorded "not established" instead of PASS (see the
file's comments). Validated when loaded against a pydantic schema: every label metric of
:data:`conformance.targets.accuracy.LABEL_METRICS` has a floor in (0, 1), no other key."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, create_model

from conformance.targets import DataFileError, Schema, load_validated
from conformance.targets.accuracy import LABEL_METRICS

FLOORS_FILE = Path(__file__).with_name("label_floors.toml")
LABEL_METRIC_NAMES = tuple(dict.fromkeys(m for metrics in LABEL_METRICS.values() for m in metrics))

Floor = Annotated[float, Field(gt=0.0, lt=1.0)]


class LabelFloorsError(DataFileError):
    """A mistake in label_floors.toml; the message names the file, line and key."""


LabelFloorsFile = create_model("LabelFloorsFile", __base__=Schema, **{m: (Floor, ...) for m in LABEL_METRIC_NAMES})


@lru_cache(maxsize=None)
def _load(path: Path) -> dict[str, float]:
    try:
        return load_validated(path, LabelFloorsFile).model_dump()
    except DataFileError as exc:
        raise LabelFloorsError(str(exc)) from None


def load_label_floors(path: Path | None = None) -> dict[str, float]:
    """Label metric -> the FP32 score its gate needs to bound anything (default file: :data:`FLOORS_FILE`, looked up
    at call time)."""
    return _load(Path(path) if path is not None else FLOORS_FILE)


load_label_floors.cache_clear = _load.cache_clear  # as the other loaders: a test that patches the file clears it
