"""System checks for the query settings (STYLE "settings"): wrong values fail at start-up, not on the
first page a caller asks for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from queries.schemas.common import MAX_LIMIT, MAX_OFFSET


@register()
def check_query_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    cap = getattr(settings, "TJWATER_EXACT_TOTAL_MAX", None)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
        errors.append(
            Error(
                "TJWATER_EXACT_TOTAL_MAX must be a non-negative integer (rows counted exactly for a page's total).",
                hint=f"The default is 10000 ({MAX_OFFSET} is the deepest offset a page may start at, "
                f"{MAX_LIMIT} its largest size).",
                id="queries.E001",
            )
        )
    return errors
