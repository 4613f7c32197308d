"""Compare two results.json of one job run on two array libraries (``--array numpy`` and another).

  python scripts/compare_array_runs.py NUMPY_RUN/results.json OTHER_RUN/results.json

Both files are read and checked as ``ipu-conformance report`` checks them. Prints the records compared, the values
equal bit for bit, the largest relative difference and every decision or figure that differs
(conformance/report/libraries.py says what must agree). Exit 0 when the decisions and verdicts are the same and the
figures within tolerance, 1 otherwise, 4 when a file cannot be read or is inconsistent.
"""

from __future__ import annotations

import sys

from conformance.report import verify
from conformance.report.libraries import compare_libraries
from conformance.report.record import ResultsError


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 4
    try:
        reference, other = (verify.load(path) for path in argv)
    except (ResultsError, verify.InconsistentResults) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    comparison = compare_libraries(reference, other)
    print(comparison.describe())
    return 0 if comparison.same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
