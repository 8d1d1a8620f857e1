"""URL configuration for the Django side. ``/mcp`` and its protected-resource metadata are routed to
``mcp_app`` by ``tjwater.asgi`` before Django sees them."""

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from contexts import dev_issuer
from tjwater.health import healthz, livez, readyz
from tjwater.metrics import metrics_view

# The admin's branding. No "View site" link: this service has no public site (the link led to a 404).
admin.site.site_header = "tjwater-mcp operations"
admin.site.site_title = "tjwater-mcp admin"
admin.site.index_title = "Projects, access and evidence"
admin.site.site_url = None

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("livez", livez, name="livez"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include("contexts.urls")),
    path("api/v1/projects/<slug:project>/", include("queries.api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi-schema"),
    # Swagger UI's init script is its own request (…/?script=), not inline: the CSP allows no inline script.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="openapi-schema", template_name="tjwater/swagger_ui.html"),
        name="openapi-docs",
    ),
    path("admin/", admin.site.urls),
    # The embedded dev issuer (R-AUTH-6); the views answer 404 unless TJWATER_DEV_ISSUER is on.
    path("dev-issuer/.well-known/openid-configuration", dev_issuer.discovery_view, name="dev-issuer-discovery"),
    path("dev-issuer/jwks", dev_issuer.jwks_view, name="dev-issuer-jwks"),
]

if settings.TJWATER_OIDC_ADMIN_ENABLED:
    from tjwater.oidc import admin_login, sign_out, signed_out

    # Operator sign-in through the OpenID provider (tjwater/oidc.py). The admin's own login and logout
    # pages are replaced (listed first, so they win): sign-in goes to the provider, and "Log out" ends the
    # provider's session too (RP-initiated logout) before coming back to /oidc/signed-out/.
    urlpatterns = [
        path("admin/login/", admin_login, name="tjwater_admin_login"),
        path("admin/logout/", sign_out, name="tjwater_admin_logout"),
        path("oidc/sign-out/", sign_out, name="tjwater_sign_out"),
        path("oidc/signed-out/", signed_out, name="tjwater_signed_out"),
        path("oidc/", include("mozilla_django_oidc.urls")),
        *urlpatterns,
    ]
elif not settings.DEBUG:
    from tjwater.oidc import admin_login_disabled

    urlpatterns = [path("admin/login/", admin_login_disabled, name="tjwater_admin_login"), *urlpatterns]


# Outside DEBUG, errors that escape a view (or never reach one) are answered by these. Under /api/ the
# body is the API's JSON error shape, never an HTML page or a trace; elsewhere (admin) Django's pages.
API_PREFIX = "/api/"


def _api_error(status: int, code: str, message: str) -> JsonResponse:
    response = JsonResponse({"code": code, "message": message, "retryable": False}, status=status)
    response["Cache-Control"] = "no-store"
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        return _api_error(404, "NOT_FOUND", "No such resource.")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith(API_PREFIX):
        return _api_error(500, "INTERNAL_ERROR", "The server failed to complete the request.")
    return defaults.server_error(request)


handler404 = not_found
handler500 = server_error
