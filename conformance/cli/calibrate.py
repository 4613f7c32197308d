"""Refit the IPU timing model's efficiencies to the published results and print every row's residual
(``ipu-conformance calibrate``); ``--write`` stores them in conformance/hardware/ipu/timing/calibration.toml."""

from __future__ import annotations

import argparse

from conformance.hardware.ipu.timing import fit
from conformance.hardware.ipu.timing.cost import CALIBRATION_FILE, calibrated_parameters, load_calibration


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write", action="store_true", help="store the fitted parameters and residuals in calibration.toml")
    parser.add_argument("--check", action="store_true",
                        help="do not refit: print the residuals of the stored parameters; fail if a row is off by more "
                             "than the error the calibration reports")


def run(args) -> int:
    rows = fit.load_rows()
    if args.check:
        params = calibrated_parameters()
        results = fit.evaluate(rows, params)
        print(fit.format_table(results, params))
        reported = float(load_calibration()["fit"]["max_abs_error"])
        worst = fit.summary(results)["max_abs_error"]
        print(f"reported max |error| {reported:.1%}, now {worst:.1%}")
        return 0 if worst <= reported + 1e-9 else 1
    params, results = fit.fit(rows)
    print(fit.format_table(results, params))
    if args.write:
        fit.write_calibration(params, results)
        print(f"written to {CALIBRATION_FILE}")
    return 0
