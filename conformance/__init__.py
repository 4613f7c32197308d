"""MLPerf-style conformance suite for the Graphcore IPU."""

__version__ = "0.1.0"  # keep in step with pyproject.toml; the installed distribution's metadata wins (ipu-conformance --version)
