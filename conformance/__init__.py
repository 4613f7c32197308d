"""MLPerf-style conformance suite for the Graphcore IPU."""
