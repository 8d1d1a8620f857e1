from django.apps import AppConfig

#: This app's tool families (``queries/tools/<family>.py``, each a ``TOOLS`` list of ``ToolSpec``).
FAMILIES = (
    "network",
    "scada",
    "baseline",
    "spatial",
    "topology",
    "ranking",
    "gis",
    "runtime",
    "peripheral",
    "analysis",
    "placement",
    "history",
)


class QueriesConfig(AppConfig):
    name = "queries"

    def ready(self) -> None:
        # Each family registers itself into the project's tool registry (tjwater.registry); the catalog,
        # binding, REST and the parity tests all read the registry.
        from importlib import import_module

        from queries import checks  # noqa: F401  (registers the system checks)
        from tjwater.registry import TOOLS

        for family in FAMILIES:
            TOOLS.register(app=self.name, family=family, tools=import_module(f"queries.tools.{family}").TOOLS)
        # The pg_sleep tool that proves cancellation: served only with TJWATER_MCP_TEST_TOOLS on.
        from queries.tools import testing

        TOOLS.register(app=self.name, family="testing", tools=testing.TOOLS, test_only=True)
