"""Django settings for tjwater-mcp.

The environment is read exactly once, here, through django-environ (STYLE "settings"). Names are the
ones fixed in SPEC §12 so deployments and scripts can rely on them. Defaults are safe: the MCP endpoint
and the dev issuer are off, and with ``DEBUG=False`` a missing ``SECRET_KEY`` or a dev ``ALLOWED_HOSTS``
refuses to start.
"""

from __future__ import annotations

from pathlib import Path

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A local `.env` (written by `make setup` for the demo run, never committed) fills in variables the
# process environment does not set. TJWATER_READ_ENV_FILE=0 ignores it (tests of the defaults do).
_env_file = BASE_DIR / ".env"
if env.bool("TJWATER_READ_ENV_FILE", default=True) and _env_file.is_file():
    environ.Env.read_env(str(_env_file))

DEBUG = env.bool("DEBUG", default=False)

_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"  # noqa: S105 - dev-only marker
_DEV_ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

SECRET_KEY = env.str("SECRET_KEY", default="")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
if DEBUG:
    SECRET_KEY = SECRET_KEY or _DEV_SECRET_KEY
    ALLOWED_HOSTS = ALLOWED_HOSTS or _DEV_ALLOWED_HOSTS
else:
    if not SECRET_KEY or SECRET_KEY == _DEV_SECRET_KEY:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG=False")
    if not ALLOWED_HOSTS or sorted(ALLOWED_HOSTS) == sorted(_DEV_ALLOWED_HOSTS):
        raise ImproperlyConfigured("ALLOWED_HOSTS must name the deployment's hosts when DEBUG=False")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.gis",
    "rest_framework",
    "mozilla_django_oidc",
    "contexts",
    "queries",
    "evidence",
    "mcp_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tjwater.urls"
ASGI_APPLICATION = "tjwater.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostGIS through psycopg 3. Under ASGI every request runs in its own thread, and persistent
# connections would open one connection per thread (SDK_NOTES "Performance"): use Django's pool.
DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgis://postgres@127.0.0.1:5432/tjwater"),
}
DATABASES["default"]["ENGINE"] = "django.contrib.gis.db.backends.postgis"
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)
if env.bool("TJWATER_DB_POOL", default=True):
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 1,
        "max_size": env.int("TJWATER_DB_POOL_MAX", default=16),
        "timeout": 10,
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

# Data directory for files the service owns (the dev issuer's key lives here, mode 0600).
TJWATER_DATA_DIR = Path(env.str("TJWATER_DATA_DIR", default=str(BASE_DIR / "var")))

# GDAL on Debian 12 is 3.6; GeoDjango warns that < 3.9 is deprecated. Nothing here needs newer GDAL.
SILENCED_SYSTEM_CHECKS = ["gis.W001"]

# --- Redis / Celery (SPEC §9) -------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The beat schedule lives in code (SPEC §9). Entries name tasks by their explicit names; a task that
# does not exist yet is simply not registered by its app.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "health-heartbeat": {
        "task": "tjwater.heartbeat",
        "schedule": crontab(minute="*/5"),
    },
    # Context handles (SPEC §9): stale bindings revoked every minute, dead ones purged hourly.
    "contexts-revoke-stale": {
        "task": "contexts.revoke_stale",
        "schedule": 60.0,
    },
    "contexts-purge": {
        "task": "contexts.purge",
        "schedule": crontab(minute=17),
    },
}

# --- MCP endpoint (SPEC §2, §3, §12) -------------------------------------------------------------
TJWATER_MCP_ENABLED = env.bool("TJWATER_MCP_ENABLED", default=False)
TJWATER_MCP_RESOURCE_URI = env.str("TJWATER_MCP_RESOURCE_URI", default="http://127.0.0.1:8000/mcp")
TJWATER_MCP_AUDIENCE = env.str("TJWATER_MCP_AUDIENCE", default="tjwater-mcp")
TJWATER_DEV_ISSUER = env.bool("TJWATER_DEV_ISSUER", default=False)
TJWATER_DEV_ISSUER_ID = "http://127.0.0.1:8000/dev-issuer"
if TJWATER_DEV_ISSUER and not DEBUG:
    raise ImproperlyConfigured("TJWATER_DEV_ISSUER is a development aid and is refused with DEBUG=False")
TJWATER_OIDC_ISSUER = env.str("TJWATER_OIDC_ISSUER", default=TJWATER_DEV_ISSUER_ID if TJWATER_DEV_ISSUER else "")
TJWATER_OIDC_JWKS_URL = env.str("TJWATER_OIDC_JWKS_URL", default="")
TJWATER_MCP_ALLOWED_CLIENTS = env.list("TJWATER_MCP_ALLOWED_CLIENTS", default=["tjwater-agent-mcp"])
TJWATER_MCP_HOST_CLIENT = env.str("TJWATER_MCP_HOST_CLIENT", default="tjwater-agent-mcp")
# Empty means "every catalog tool" (SPEC §12); a list narrows the exposed catalog.
TJWATER_MCP_EXPOSED_TOOLS = env.list("TJWATER_MCP_EXPOSED_TOOLS", default=[])
TJWATER_MCP_QUERY_BUDGET_S = env.int("TJWATER_MCP_QUERY_BUDGET_S", default=30)
TJWATER_MCP_MAX_CONCURRENT = env.int("TJWATER_MCP_MAX_CONCURRENT", default=4)
TJWATER_CONTEXT_TTL_S = env.int("TJWATER_CONTEXT_TTL_S", default=600)
# Revoked or expired context bindings are deleted this long after they stopped working (contexts.purge).
TJWATER_CONTEXT_RETENTION_S = env.int("TJWATER_CONTEXT_RETENTION_S", default=7 * 24 * 3600)
# Where the context API reads the tool catalog (tool name -> required permission codes) and the
# task-scoped tools from, imported at call time (contexts may not import queries at import time).
TJWATER_TOOL_CATALOG_PROVIDER = "queries.registry.permission_catalog"
TJWATER_TASK_SCOPED_TOOLS_PROVIDER = "queries.registry.task_scoped_tools"
# Client credentials of this service at the real issuer (manage.py mcp_token --client-credentials).
TJWATER_OIDC_CLIENT_ID = env.str("TJWATER_OIDC_CLIENT_ID", default="")
TJWATER_OIDC_CLIENT_SECRET = env.str("TJWATER_OIDC_CLIENT_SECRET", default="")
# Seconds the verified JWKS stays cached, and the minimum gap between refetches triggered by an
# unknown `kid` (a flood of forged kids must not turn into a flood of JWKS requests, R-AUTH-2).
TJWATER_OIDC_JWKS_CACHE_S = env.int("TJWATER_OIDC_JWKS_CACHE_S", default=300)
TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S = env.float("TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S", default=30.0)
TJWATER_OIDC_HTTP_TIMEOUT_S = env.float("TJWATER_OIDC_HTTP_TIMEOUT_S", default=3.0)
# The issuer's JWKS (and discovery document) re-read into the shared cache ahead of expiry, so no request
# pays for the fetch and a newly published key is known before tokens signed with it arrive (SPEC §9):
# at 40 % of the cache lifetime (120 s for the default 300 s), so one missed run still leaves a fresh copy.
CELERY_BEAT_SCHEDULE["contexts-refresh-issuer-keys"] = {
    "task": "contexts.refresh_issuer_keys",
    "schedule": max(10.0, TJWATER_OIDC_JWKS_CACHE_S * 0.4),
}
# Lease of one in-flight query slot in Redis (R-PAGE-7). A live process refreshes its leases every
# third of this; a killed process's slot frees itself when the lease runs out.
TJWATER_MCP_SLOT_LEASE_S = env.float("TJWATER_MCP_SLOT_LEASE_S", default=10.0)
# Inline result cap in bytes of JSON (R-PAGE-5).
TJWATER_MCP_INLINE_MAX_BYTES = env.int("TJWATER_MCP_INLINE_MAX_BYTES", default=12000)
# Transport security (DNS rebinding protection of the SDK): Host values accepted on /mcp, and
# browser Origins accepted. Default: ALLOWED_HOSTS on any port, and the resource URI's origin.
TJWATER_MCP_ALLOWED_ORIGINS = env.list("TJWATER_MCP_ALLOWED_ORIGINS", default=[])
# Registers the test-only tools (a pg_sleep query used to prove cancellation). Test settings only.
TJWATER_MCP_TEST_TOOLS = False

# --- Admin single sign-on (mozilla-django-oidc); unset = no OIDC admin login --------------------
OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default="")
OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
TJWATER_OIDC_ADMIN_ENABLED = bool(OIDC_RP_CLIENT_ID and OIDC_OP_AUTHORIZATION_ENDPOINT)

AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]

# Operators only (tjwater/oidc.py): the role a token must carry, where it sits in the claims (Keycloak's
# realm roles by default), and the Django group that gives operators access to the product's admin pages.
OIDC_OP_ISSUER = env.str("OIDC_OP_ISSUER", default=TJWATER_OIDC_ISSUER)
TJWATER_OIDC_OPERATOR_ROLE = env.str("TJWATER_OIDC_OPERATOR_ROLE", default="tjwater-operator")
TJWATER_OIDC_ROLES_CLAIM = env.str("TJWATER_OIDC_ROLES_CLAIM", default="realm_access.roles")
TJWATER_OIDC_OPERATOR_GROUP = env.str("TJWATER_OIDC_OPERATOR_GROUP", default="operators")
OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile roles")
OIDC_USE_NONCE = True
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_TIMEOUT = env.int("OIDC_TIMEOUT", default=10)
OIDC_CALLBACK_CLASS = "tjwater.oidc.OperatorCallbackView"
LOGIN_REDIRECT_URL = "/admin/"
if TJWATER_OIDC_ADMIN_ENABLED:
    _missing_oidc = [
        name
        for name, value in {
            "OIDC_RP_CLIENT_SECRET": OIDC_RP_CLIENT_SECRET,
            "OIDC_OP_TOKEN_ENDPOINT": OIDC_OP_TOKEN_ENDPOINT,
            "OIDC_OP_USER_ENDPOINT": OIDC_OP_USER_ENDPOINT,
            "OIDC_OP_JWKS_ENDPOINT": OIDC_OP_JWKS_ENDPOINT,
            "OIDC_OP_ISSUER (or TJWATER_OIDC_ISSUER)": OIDC_OP_ISSUER,
        }.items()
        if not value
    ]
    if _missing_oidc:
        raise ImproperlyConfigured(f"OIDC admin login is configured but incomplete: set {', '.join(_missing_oidc)}")
    # With DEBUG=False there is no local password login to the admin: only the provider signs people in.
    AUTHENTICATION_BACKENDS = ["tjwater.oidc.OperatorOIDCBackend"] + (
        ["django.contrib.auth.backends.ModelBackend"] if DEBUG else []
    )
elif not DEBUG:
    # Without OIDC, a local superuser may sign in to the admin only in development (DEBUG=True):
    # a production deployment without the provider has no admin sign-in at all (refuse by default).
    AUTHENTICATION_BACKENDS = []

REST_FRAMEWORK = {
    # The context API authenticates with the MCP bearer validator explicitly per view; no global
    # authenticator (SPEC R-AUTH-2).
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": None,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
