"""Settings for the test suite: the real settings module with test-safe environment defaults.

Tests use a reserved Redis database index (15) and the dev issuer; the database is PostGIS, created by
pytest-django as ``test_<name>`` with the ``postgis`` extension (the connecting role is a superuser).
uvicorn processes started by end-to-end tests load this same module.
"""

import os

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("TJWATER_MCP_ENABLED", "1")
os.environ.setdefault("TJWATER_DEV_ISSUER", "1")
os.environ.setdefault("TJWATER_DATA_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))

from tjwater.settings import *  # noqa: E402,F403

CELERY_BROKER_URL = os.environ["REDIS_URL"]
CELERY_RESULT_BACKEND = os.environ["REDIS_URL"]

# A tool family added by an app of its own, as any app adds one (tests/support/extra_family, issue 18 §1).
INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.extra_family.apps.ExtraFamilyConfig"]  # noqa: F405

# Test-only MCP tools (the slow pg_sleep query proving cancellation, issue 4) exist only here.
TJWATER_MCP_TEST_TOOLS = True
