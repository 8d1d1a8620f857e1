"""HTTP security headers Django has no setting for: ``Permissions-Policy`` (W3C Permissions Policy).

``Content-Security-Policy`` comes from django-csp (settings ``CONTENT_SECURITY_POLICY``); the others
(``X-Frame-Options``, ``Referrer-Policy``, ``X-Content-Type-Options``, COOP, HSTS) from Django's own
middleware."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin


class PermissionsPolicyMiddleware(MiddlewareMixin):
    """Adds ``settings.TJWATER_PERMISSIONS_POLICY`` to every response that has none (sync and async)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        response.headers.setdefault("Permissions-Policy", settings.TJWATER_PERMISSIONS_POLICY)
        return response
