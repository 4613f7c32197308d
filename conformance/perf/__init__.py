"""Performance of the suite: the IPU timing model (trace, devices, timing, calibration, packing) and the MLPerf
LoadGen harness (systems under test, scenarios, the seed benchmark's closed loop)."""
