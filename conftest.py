"""Registers the conformance plugin for every test run from this repository."""

pytest_plugins = ["conformance.plugin"]
