"""The MCP endpoint tests: every module here gets one committed context per Net1 member (the
``e2e_handles`` fixture of tests/conftest.py, created for the module and deleted after it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _module_handles(e2e_handles: dict[str, str]) -> None:
    """Each module's contexts (see tests/conftest.py ``e2e_handles``)."""
