"""The query-service tests use the fixtures of ``tests/queries/conftest.py`` (demo server, handles,
``demo_call``); the helpers are re-exported here for the modules that import them from this package."""

from tests.queries.conftest import CLIENT, DEMO, DEMO_B, business_error, structured, validate_output

__all__ = ["CLIENT", "DEMO", "DEMO_B", "business_error", "structured", "validate_output"]
