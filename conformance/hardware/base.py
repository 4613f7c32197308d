"""What every hardware backend provides: its precisions, capability checks, and an ops object per model and precision."""

from __future__ import annotations

from conformance.hardware.ops import Ops


class UnsupportedCombination(Exception):
    """A model/precision pair this backend cannot run; the conformance test is skipped with this reason."""


class Backend:
    """A hardware target. Subclasses set ``name``, ``precisions`` and implement :meth:`make_ops`."""

    name: str = ""
    precisions: tuple[str, ...] = ()
    description: str = ""

    def check_precision(self, precision: str) -> None:
        if precision not in self.precisions:
            raise ValueError(
                f"unknown precision {precision!r} for hardware {self.name!r}; expected one of: {', '.join(self.precisions)}"
            )

    def supports(self, model_name: str, precision: str) -> None:
        """Raise UnsupportedCombination with a reason when this backend cannot run the pair."""
        self.check_precision(precision)

    def make_ops(self, model, precision: str, *, recorder=None, **options) -> Ops:
        """The ops object that runs ``model`` at ``precision`` on this hardware."""
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        """Versions of what this backend runs on, for the report header."""
        return {}
