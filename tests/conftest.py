"""Shared test configuration: the pytester fixture for testing the plugin."""

import sys

if sys.version_info < (3, 12):
    # Dask (the distributed engine) imports the importlib_metadata backport on Python < 3.12, which deletes the
    # standard library's distribution finder for good. Imported here, before any in-process pytest run (pytester)
    # snapshots sys.meta_path and sys.modules, so that every later run still finds the suite's pytest11 entry point.
    import importlib_metadata  # noqa: F401

pytest_plugins = ["pytester"]
