"""REST routes of the contexts app (mounted under /api/v1/)."""

from django.urls import path

from contexts.api import ContextCreateApi, ContextDeleteApi

urlpatterns = [
    path("mcp-query-contexts", ContextCreateApi.as_view(), name="mcp-query-contexts"),
    path("mcp-query-contexts/<str:handle>", ContextDeleteApi.as_view(), name="mcp-query-context"),
]
