"""One job run on two array libraries (``--array numpy`` and another): the same decisions, and how close the figures are.

The roundings are bit-exact on every library; what may differ is the order of FP32 sums inside a matmul or conv
(numpy's BLAS against torch's or cuBLAS's kernels). So two such runs must agree in every decision (a record's
``passed``, ``outcome``, ``established``, its gating), in every test's outcome and in the run's verdict, and their
figures must agree closely (a ratio gate's target too: it follows the figure it is relative to), except:

* ``rounding_bias`` (the mean signed error of the FP16 results, in units of their spacing) follows the last bits of
  the FP32 sums at float partials: a different summation order moves it, within its gate;
* ``snr_db`` at float partials measures the FP16 results' rounding noise, and a different summation order flips some
  of the roundings of every layer, which carry on to the outputs: the two runs are two draws of the noise over the
  same ``n`` values (``values`` in the record's tensor metrics). Their noise energies are compared: within
  ``10 log10(1 + 10 / sqrt(n))`` dB, five times the spread (``2 / sqrt(n)``) of the ratio of two independent noise
  energies of ``n`` values each (6.6 dB for 8 values, 1.6 dB for 512);
* the host's facts (timings, the engine, ``details.array`` itself).

At half partials (the fp8 precisions) the block products are exact in FP32 or rounded within one block before each
FP16 rounding, so their figures are compared for equality and listed where they differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOST_FACTS = ("calibration_s", "run_s", "op_checks_s", "engine", "array")
ORDER_SENSITIVE = ("rounding_bias",)  # follows the FP32 summation order at float partials
DECISIONS = ("passed", "outcome", "established", "gating", "op", "units")
NOISE_FIGURES = ("snr_db",)  # a draw of the rounding noise at float partials
NOISE_SIGMAS = 5.0
REL_TOL, ABS_TOL = 1e-2, 1e-6  # figures other than the order-sensitive ones


@dataclass
class LibraryComparison:
    """What differs between a reference run and the same job on another library."""

    reference: str
    other: str
    records: int = 0
    decisions: list[str] = field(default_factory=list)  # a verdict, outcome or record decision that differs: fails
    figures: list[str] = field(default_factory=list)  # a figure beyond REL_TOL/ABS_TOL: fails
    inexact_half_partials: list[str] = field(default_factory=list)  # an fp8 figure not bit-equal: listed
    equal_values: int = 0
    max_relative: float = 0.0
    max_relative_check: str = ""

    @property
    def same(self) -> bool:
        return not self.decisions and not self.figures

    def describe(self) -> str:
        lines = [f"{self.other} against {self.reference}: {self.records} records, {self.equal_values} values equal "
                 f"bit for bit, largest relative difference {self.max_relative:.3g}"
                 + (f" ({self.max_relative_check})" if self.max_relative_check else "")]
        for title, items in (("decisions that differ", self.decisions), ("figures beyond the tolerance", self.figures),
                             ("half-partials figures not bit-equal", self.inexact_half_partials)):
            lines.append(f"{title}: {len(items)}")
            lines.extend(f"  {item}" for item in items)
        lines.append(("DIFFERENT" if self.decisions else "SAME") + " decisions and verdicts; "
                     + (f"{len(self.figures)} figures beyond the tolerance" if self.figures
                        else "figures within the tolerance"))
        return "\n".join(lines)


def _close(a, b) -> bool:
    """Whether two figures agree within the summation order's tolerance (equal, for what is not a number)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def noise_tolerance_db(values: int) -> float:
    """How far apart (dB) two correct SNRs of ``values`` values may lie when their roundings are two draws."""
    return 10.0 * math.log10(1.0 + 2.0 * NOISE_SIGMAS / math.sqrt(values))


def _noise_values(record: dict) -> int | None:
    """The count of values an SNR record was measured on (its worst output's), None where the record does not say."""
    details = record.get("details", {})
    tensor = details.get("tensor_metrics", {}).get(details.get("worst_output"), {})
    values = tensor.get("values") if isinstance(tensor, dict) else None
    return values if isinstance(values, int) and not isinstance(values, bool) and values > 0 else None


def _relative(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def compare_libraries(reference: dict, other: dict) -> LibraryComparison:
    """Compare two results.json documents (already read and verified) of one job on two array libraries."""
    ref_array, other_array = reference["settings"].get("array"), other["settings"].get("array")
    result = LibraryComparison(str(ref_array), str(other_array))
    for key in ("verdict", "exit_status"):
        if reference.get(key) != other.get(key):
            result.decisions.append(f"run {key}: {reference.get(key)!r} != {other.get(key)!r}")
    ref_tests = {t["id"]: t["outcome"] for t in reference.get("tests", [])}
    other_tests = {t["id"]: t["outcome"] for t in other.get("tests", [])}
    for test in sorted(set(ref_tests) | set(other_tests)):
        if ref_tests.get(test) != other_tests.get(test):
            result.decisions.append(f"test {test}: {ref_tests.get(test)} != {other_tests.get(test)}")
    expected = {r["id"]: r for r in reference["records"]}
    got = {r["id"]: r for r in other["records"]}
    for key in sorted(set(expected) ^ set(got)):
        result.decisions.append(f"record {key}: only in the {'reference' if key in expected else 'other'} run")
    for key in sorted(set(expected) & set(got)):
        record, twin = expected[key], got[key]
        result.records += 1
        for name in DECISIONS:
            if record.get(name) != twin.get(name):
                result.decisions.append(f"{key}: {name} {record.get(name)!r} != {twin.get(name)!r}")
        target, other_target = record.get("target"), twin.get("target")
        if not _close(target, other_target):
            result.decisions.append(f"{key}: target {target!r} != {other_target!r}")
        details = {k for k in record.get("details", {}) if k not in HOST_FACTS}
        other_details = {k for k in twin.get("details", {}) if k not in HOST_FACTS}
        if details != other_details:
            result.decisions.append(f"{key}: details fields {sorted(details ^ other_details)} on one side only")
        value, other_value = record.get("value"), twin.get("value")
        if not isinstance(value, (int, float)) or not isinstance(other_value, (int, float)):
            if value != other_value:
                result.figures.append(f"{key}: {value!r} != {other_value!r}")
            continue
        if value == other_value:
            result.equal_values += 1
            continue
        if record.get("precision", "").startswith("fp8"):
            result.inexact_half_partials.append(f"{key}: {value!r} != {other_value!r}")
        if record["check"] in ORDER_SENSITIVE:
            continue
        relative = _relative(value, other_value)
        values = _noise_values(record)
        if (record["check"] in NOISE_FIGURES and not record.get("precision", "").startswith("fp8")
                and values is not None and values == _noise_values(twin)):
            apart = abs(value - other_value)
            if not apart <= noise_tolerance_db(values):
                result.figures.append(f"{key}: {value!r} != {other_value!r} ({apart:.3g} dB apart; two draws of the "
                                      f"noise of {values} values lie within {noise_tolerance_db(values):.3g} dB)")
            continue
        if relative > result.max_relative:
            result.max_relative, result.max_relative_check = relative, key
        if not _close(value, other_value):
            result.figures.append(f"{key}: {value!r} != {other_value!r} (relative {relative:.3g})")
    return result
