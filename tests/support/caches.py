"""The process caches that depend on settings, resettable between tests: each is cleared by the
``reset_*`` hook of the source module that owns it. Tests that change the settings these caches read
(the issuer, the data directory, the exposed tools) use the ``fresh_caches`` fixture (tests/conftest.py),
which calls ``reset_process_caches`` before and after the test."""

from __future__ import annotations


def reset_process_caches() -> None:
    """Clear this process's settings-derived caches: the token validators (/mcp and REST), the dev
    issuer's key, the REST tool specs."""
    from contexts import dev_issuer, rest, tokens
    from queries import api

    tokens.reset_validator()
    rest.reset_api_validator()
    dev_issuer.reset_caches()
    api.reset_caches()
