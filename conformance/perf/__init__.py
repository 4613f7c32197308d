"""Performance of the suite: the MLPerf LoadGen harness (systems under test, scenarios, the seed benchmark's closed
loop), its logs and rules, the TEST01/TEST04 audits, and virtual time. The IPU timing model that prices an op trace
is the ``ipu`` hardware's own (:mod:`conformance.hardware.ipu.timing`)."""
