from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP endpoint"

    def ready(self) -> None:
        from mcp_app import checks  # noqa: F401 - registers the system checks
