"""Fixtures for every test: greenroom's own pytest plugin (``greenroom``, ``greenroom_agent``,
``greenroom_store``), as users enable it."""

pytest_plugins = ["greenroom.testing.plugin"]
