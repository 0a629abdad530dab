"""Shared test configuration: pytester for the plugin tests."""

pytest_plugins = ["pytester"]
