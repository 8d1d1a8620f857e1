"""URL configuration for the Django side. ``/mcp`` and its protected-resource metadata are routed to
``mcp_app`` by ``tjwater.asgi`` before Django sees them."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from contexts import dev_issuer
from tjwater.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("contexts.urls")),
    path("admin/", admin.site.urls),
    # The embedded dev issuer (R-AUTH-6); the views answer 404 unless TJWATER_DEV_ISSUER is on.
    path("dev-issuer/.well-known/openid-configuration", dev_issuer.discovery_view, name="dev-issuer-discovery"),
    path("dev-issuer/jwks", dev_issuer.jwks_view, name="dev-issuer-jwks"),
]

if settings.TJWATER_OIDC_ADMIN_ENABLED:
    from tjwater.oidc import admin_login

    # Operator sign-in through the OpenID provider (tjwater/oidc.py). The admin's own login page is
    # replaced (listed first, so it wins) and sends the browser to the provider.
    urlpatterns = [
        path("admin/login/", admin_login, name="tjwater_admin_login"),
        path("oidc/", include("mozilla_django_oidc.urls")),
        *urlpatterns,
    ]
elif not settings.DEBUG:
    from tjwater.oidc import admin_login_disabled

    urlpatterns = [path("admin/login/", admin_login_disabled, name="tjwater_admin_login"), *urlpatterns]
