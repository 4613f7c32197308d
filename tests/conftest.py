"""Shared test configuration: the pytester fixture for testing the plugin."""

pytest_plugins = ["pytester"]
