"""Settings of the server ``make bench`` measures: the production settings (``tjwater.settings`` with the
environment ``scripts/bench.py`` sets: DEBUG off, the devtools provider as issuer) plus the test-only
``test_slow_query`` tool, which the cancellation-latency probe needs (a statement that runs long enough to
be seen in ``pg_stat_activity``). Nothing else differs."""

from tjwater.settings import *  # noqa: F403

TJWATER_MCP_TEST_TOOLS = True
