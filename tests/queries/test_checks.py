"""The query settings' system checks."""

from __future__ import annotations

import pytest

from queries.checks import check_query_settings


@pytest.mark.parametrize("value", [-1, "10000", True, None])
def test_a_bad_exact_total_threshold_is_refused_at_start(settings, value) -> None:  # noqa: ANN001
    settings.TJWATER_EXACT_TOTAL_MAX = value
    assert [e.id for e in check_query_settings()] == ["queries.E001"]


def test_the_default_threshold_passes(settings) -> None:  # noqa: ANN001
    settings.TJWATER_EXACT_TOTAL_MAX = 10000
    assert check_query_settings() == []
