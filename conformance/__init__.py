"""MLPerf-style conformance suite for the Graphcore IPU."""

__version__ = "0.1.0"  # the one statement of the version: pyproject.toml reads it (dynamic), so does --version
