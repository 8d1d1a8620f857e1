"""URL configuration for the Django side. ``/mcp`` and its protected-resource metadata are routed to
``mcp_app`` by ``tjwater.asgi`` before Django sees them."""

from django.contrib import admin
from django.urls import include, path

from tjwater.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("contexts.urls")),
    path("admin/", admin.site.urls),
]
