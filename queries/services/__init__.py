"""Query services: one plain function per tool, keyword-only arguments, returning Pydantic models
(STYLE "reads"). Shared by the MCP endpoint and REST. Every lookup is scoped by ``scope.project_id``."""
