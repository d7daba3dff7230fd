"""Thin root conftest: the suite's options, markers and fixtures live in the fixtures/ plugin."""

pytest_plugins = ["fixtures.plugin"]
