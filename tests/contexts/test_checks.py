"""System checks of the context settings."""

from __future__ import annotations

import pytest
from django.test import override_settings

from contexts.checks import check_context_settings


def ids() -> list[str]:
    return [message.id for message in check_context_settings()]


def test_the_shipped_settings_pass() -> None:
    assert ids() == []


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"TJWATER_CONTEXT_TTL_S": 0}, "contexts.E001"),
        ({"TJWATER_CONTEXT_TTL_S": 10**6}, "contexts.E001"),
        ({"TJWATER_CONTEXT_RETENTION_S": -1}, "contexts.E002"),
        ({"TJWATER_MCP_HOST_CLIENT": ""}, "contexts.E003"),
        ({"TJWATER_MCP_HOST_CLIENT": "not-allowed"}, "contexts.W001"),
    ],
)
def test_bad_values_are_reported(override: dict[str, object], expected: str) -> None:
    with override_settings(**override):
        assert ids() == [expected]
