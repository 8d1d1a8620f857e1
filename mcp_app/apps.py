from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP endpoint"
