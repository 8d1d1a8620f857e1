from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP endpoint"

    def ready(self) -> None:
        from contexts.entry import register_binding_gate
        from mcp_app import checks  # noqa: F401 - registers the system checks
        from mcp_app.entry import refuse_binding_if_off

        # The contexts app (a lower layer) refuses new bindings while the MCP entry is off (issue 23 item 16).
        register_binding_gate(refuse_binding_if_off)
