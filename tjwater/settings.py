"""Django settings for tjwater-mcp.

The environment is read exactly once, here, through django-environ (STYLE "settings"). Names are the
ones fixed in SPEC §12 so deployments and scripts can rely on them. Defaults are safe: the MCP endpoint
and the dev issuer are off, and with ``DEBUG=False`` a missing ``SECRET_KEY`` or a dev ``ALLOWED_HOSTS``
refuses to start.
"""

from __future__ import annotations

from pathlib import Path

import django_stubs_ext
import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

# Generic Django classes (ModelAdmin[M], Serializer[T], ...) subscriptable at run time as the type stubs have them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A local `.env` fills in variables the process environment does not set — only if an operator created
# it: nothing in the project writes one (`make run` passes the demo configuration in its own
# environment), so the demo settings are never picked up implicitly. TJWATER_READ_ENV_FILE=0 ignores it.
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
    # Before staticfiles: `runserver` serves static files through WhiteNoise too, as uvicorn does.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.gis",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "mozilla_django_oidc",
    "csp",
    "contexts",
    "queries",
    "evidence",
    "analyses",
    "mcp_app",
]

MIDDLEWARE = [
    # First: it times (and, with tracing on, spans) everything below it (tjwater/metrics.py, issue 24).
    "tjwater.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A body over TJWATER_REQUEST_MAX_BYTES → 413 before anything reads it; after the metrics (counted).
    "tjwater.bounds.RequestBodyLimitMiddleware",
    # Static files (the admin's and Swagger UI's) straight after SecurityMiddleware, so they get its
    # headers and skip everything else (WhiteNoise's documented place).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "tjwater.security.PermissionsPolicyMiddleware",
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
        # templates/ first: it overrides drf-spectacular's Swagger UI page (no inline style, for the CSP).
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
# An unreachable database must be a quick, retryable DATA_SOURCE_UNAVAILABLE, not a stall (issue 9):
# - TJWATER_DB_CONNECT_TIMEOUT_S (libpq connect_timeout; libpq's minimum is 2 s) bounds one connection
#   attempt to a host that accepts nothing or never answers;
# - TJWATER_DB_POOL_TIMEOUT_S bounds how long a request waits to check a connection out of the pool
#   (psycopg_pool.PoolTimeout → 503). While PostgreSQL is down the pool keeps reconnecting in the
#   background, so a request never waits longer than this, and the service recovers by itself.
# Both 2 s by default: a refused or hanging database answers within about 2-3 s.
TJWATER_DB_CONNECT_TIMEOUT_S = env.int("TJWATER_DB_CONNECT_TIMEOUT_S", default=2)
TJWATER_DB_POOL_TIMEOUT_S = env.float("TJWATER_DB_POOL_TIMEOUT_S", default=2.0)
DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgis://postgres@127.0.0.1:5432/tjwater"),
}
DATABASES["default"]["ENGINE"] = "django.contrib.gis.db.backends.postgis"
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", max(2, TJWATER_DB_CONNECT_TIMEOUT_S))
if env.bool("TJWATER_DB_POOL", default=True):
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 1,
        "max_size": env.int("TJWATER_DB_POOL_MAX", default=16),
        "timeout": TJWATER_DB_POOL_TIMEOUT_S,
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

# Admin dates and times carry their time zone's name ("2026-12-01 14:48:03 UTC"): tjwater/formats/.
FORMAT_MODULE_PATH = ["tjwater.formats"]

# Static files (the admin's, Swagger UI's from drf-spectacular-sidecar, ours in static/) are collected into
# STATIC_ROOT by `manage.py collectstatic` (scripts/setup.sh runs it; so must a deployment) and served by
# WhiteNoise from the same process, under uvicorn, with DEBUG on or off: compressed (gzip) copies and
# content-hashed names, so they are cached "forever" by browsers and a new release never serves stale files.
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Data directory for files the service owns (the dev issuer's key lives here, mode 0600).
TJWATER_DATA_DIR = Path(env.str("TJWATER_DATA_DIR", default=str(BASE_DIR / "var")))

# --- Bounds on what comes from outside (issue 41) ----------------------------------------------------
# Every importer (import_network, import_gis, import_scada_devices, import_scada; there is no upload form,
# and one added later reads through queries.importer.bounded too) reads within these, whatever the file:
# a longer line or field, more columns or features, a bigger or more compressed archive member, or a time
# outside the years is refused by line / field / member.
TJWATER_IMPORT_MAX_LINE_BYTES = env.int("TJWATER_IMPORT_MAX_LINE_BYTES", default=1024 * 1024)
TJWATER_IMPORT_MAX_FIELD_BYTES = env.int("TJWATER_IMPORT_MAX_FIELD_BYTES", default=64 * 1024)
TJWATER_IMPORT_MAX_COLUMNS = env.int("TJWATER_IMPORT_MAX_COLUMNS", default=10_000)
TJWATER_IMPORT_MAX_FEATURES = env.int("TJWATER_IMPORT_MAX_FEATURES", default=1_000_000)
TJWATER_IMPORT_MAX_UNPACKED_BYTES = env.int("TJWATER_IMPORT_MAX_UNPACKED_BYTES", default=8 * 1024**3)
TJWATER_IMPORT_MAX_RATIO = env.int("TJWATER_IMPORT_MAX_RATIO", default=200)
TJWATER_IMPORT_MIN_YEAR = env.int("TJWATER_IMPORT_MIN_YEAR", default=1970)
TJWATER_IMPORT_MAX_YEAR = env.int("TJWATER_IMPORT_MAX_YEAR", default=2100)
# Endpoints (REST; /mcp has its own): a body over this is refused 413 before it is parsed (Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE is the same number), and JSON nested deeper than this is refused 400.
TJWATER_REQUEST_MAX_BYTES = env.int("TJWATER_REQUEST_MAX_BYTES", default=1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = TJWATER_REQUEST_MAX_BYTES
TJWATER_JSON_MAX_DEPTH = env.int("TJWATER_JSON_MAX_DEPTH", default=64)

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
    # Evidence receipts left pending by a crashed process (older than the query budget) → failed, so a
    # retry with the same request key can proceed (SPEC §9, R-EVID-2).
    "evidence-fail-stale-receipts": {
        "task": "evidence.fail_stale_receipts",
        "schedule": 60.0,
    },
}
# The rolling model baseline (issue 21): every project's baseline covers [now − PAST_DAYS, now + 1 day],
# what is missing simulated every STEP seconds' grid, hourly, one project at a time.
TJWATER_BASELINE_PAST_DAYS = env.int("TJWATER_BASELINE_PAST_DAYS", default=7)
TJWATER_BASELINE_STEP_S = env.int("TJWATER_BASELINE_STEP_S", default=900)
CELERY_BEAT_SCHEDULE["queries-rolling-baseline"] = {"task": "queries.rolling_baseline", "schedule": crontab(minute=7)}
# The job runner's reaper (issue 42): jobs left running by a dead worker, past their limit, or queued for
# hours end failed with a reason, every minute.
CELERY_BEAT_SCHEDULE["queries-reap-jobs"] = {"task": "queries.reap_jobs", "schedule": 60.0}
# Analysis runs past their project's retention (issue 42 item 8), unless evidence refers to them: purged in
# bounded batches, hourly.
CELERY_BEAT_SCHEDULE["analyses-purge-expired-runs"] = {
    "task": "analyses.purge_expired_runs",
    "schedule": crontab(minute=37),
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
# Read-only PostgreSQL connections of /mcp's own query pool, per server process (mcp_app.pool), opened
# at start-up and kept. Total connections = TJWATER_WORKERS × (this + TJWATER_DB_POOL_MAX) + Celery; keep
# it below PostgreSQL's max_connections (README "Scale out"). A process runs at most this minus 1-2 tool
# queries at once (the rest resolve new calls) and refuses more at once with RATE_LIMITED.
TJWATER_MCP_DB_POOL_SIZE = env.int("TJWATER_MCP_DB_POOL_SIZE", default=10)
TJWATER_CONTEXT_TTL_S = env.int("TJWATER_CONTEXT_TTL_S", default=600)
# Live (unexpired, unrevoked) contexts one principal may hold in one project; a bind beyond it is refused
# with CONTEXT_LIMIT_REACHED (the oldest is never silently revoked).
TJWATER_CONTEXT_MAX_LIVE = env.int("TJWATER_CONTEXT_MAX_LIVE", default=50)
# Binding API rate per principal (all workers together, a token bucket in Redis): average binds per second
# and burst; beyond it RATE_LIMITED with Retry-After. 0 switches the limit off.
TJWATER_BIND_RATE_PER_S = env.float("TJWATER_BIND_RATE_PER_S", default=20.0)
TJWATER_BIND_BURST = env.int("TJWATER_BIND_BURST", default=60)
# Revoked or expired context bindings are deleted this long after they stopped working (contexts.purge).
TJWATER_CONTEXT_RETENTION_S = env.int("TJWATER_CONTEXT_RETENTION_S", default=7 * 24 * 3600)
# Client credentials of this service at the real issuer (manage.py mcp_token --client-credentials).
TJWATER_OIDC_CLIENT_ID = env.str("TJWATER_OIDC_CLIENT_ID", default="")
TJWATER_OIDC_CLIENT_SECRET = env.str("TJWATER_OIDC_CLIENT_SECRET", default="")
# Seconds the verified JWKS stays cached, and the minimum gap between refetches triggered by an
# unknown `kid` (a flood of forged kids must not turn into a flood of JWKS requests, R-AUTH-2).
TJWATER_OIDC_JWKS_CACHE_S = env.int("TJWATER_OIDC_JWKS_CACHE_S", default=300)
TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S = env.float("TJWATER_OIDC_JWKS_REFETCH_COOLDOWN_S", default=30.0)
# While the issuer is unreachable, the last good keys keep serving for this many seconds past the cache
# lifetime (one background refresh at a time retries); after that verification answers a retryable 503
# (issue 9 item 4, R-AUTH-5). 0 = no grace.
TJWATER_OIDC_JWKS_GRACE_S = env.int("TJWATER_OIDC_JWKS_GRACE_S", default=3600)
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
# A collection's total is counted exactly up to this many rows; above it the page answers total=null
# (R-PAGE-1) with an exact has_more (queries.paging; the figure is a measurement, mcp_app/README.md).
TJWATER_EXACT_TOTAL_MAX = env.int("TJWATER_EXACT_TOTAL_MAX", default=10000)
# Inline result cap in bytes of JSON (R-PAGE-5).
TJWATER_MCP_INLINE_MAX_BYTES = env.int("TJWATER_MCP_INLINE_MAX_BYTES", default=12000)
# A tools/call that stays silent this long commits text/event-stream and is pinged every interval (so a
# proxy's idle-read timeout cannot cut it; the SDK's deferral window, mcp_app.transport).
TJWATER_MCP_SSE_PING_S = env.float("TJWATER_MCP_SSE_PING_S", default=15.0)
# Transport security (DNS rebinding protection of the SDK): Host values accepted on /mcp, and
# browser Origins accepted. Default: ALLOWED_HOSTS on any port, and the resource URI's origin.
TJWATER_MCP_ALLOWED_ORIGINS = env.list("TJWATER_MCP_ALLOWED_ORIGINS", default=[])
# Registers the test-only tools (a pg_sleep query used to prove cancellation). Test settings only.
TJWATER_MCP_TEST_TOOLS = False
# The analysis tools (run_* and cancel_analysis_run, issue 42) join the generic catalog only when the
# deployment turns them on (seed 000: off by default); `make run`'s demo does.
TJWATER_MCP_ANALYSIS_TOOLS = env.bool("TJWATER_MCP_ANALYSIS_TOOLS", default=False)
# How much an analysis run may grow its worker's address space (MiB; RLIMIT_AS while it runs): past it the
# run ends MEMORY_LIMIT with nothing written. 0 = no limit.
TJWATER_ANALYSIS_MEMORY_LIMIT_MB = env.int("TJWATER_ANALYSIS_MEMORY_LIMIT_MB", default=2048)

# --- Operations: metrics, traces, log format (issue 24; README "Operations") ----------------------
# /metrics answers only `Authorization: Bearer <this>`; empty = /metrics does not exist (404).
TJWATER_METRICS_TOKEN = env.str("TJWATER_METRICS_TOKEN", default="")
# With N server processes, prometheus-client keeps each process's values in files here and /metrics adds
# them up (prometheus-client reads the variable from the environment itself; scripts/run.sh sets it).
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="")
# Traces are exported over OTLP/HTTP to <this>/v1/traces; empty = no tracing (tjwater/telemetry.py).
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
# "plain" (default) or "json": one JSON object per line, with trace_id/span_id while tracing.
TJWATER_LOG_FORMAT = env.str("TJWATER_LOG_FORMAT", default="plain")

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
# Signing out of the admin also ends the session at the provider (OpenID Connect RP-Initiated Logout 1.0):
# the browser is sent to this endpoint (Keycloak: <realm>/protocol/openid-connect/logout) with the
# id_token as `id_token_hint` and comes back to /oidc/signed-out/, which must be registered at the provider
# as a post-logout redirect URI of the client. Unset: signing out ends only the admin session here.
OIDC_OP_END_SESSION_ENDPOINT = env.str("OIDC_OP_END_SESSION_ENDPOINT", default="")
# The id_token is kept in the (server-side) session for that hint; it is never logged.
OIDC_STORE_ID_TOKEN = True
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
    # An operator's admin session is re-checked at the provider this often: once the id_token's renewal
    # time has passed, the next admin page (a GET) sends the browser through a silent `prompt=none`
    # authorization, and the callback signs the operator in again only if the provider still vouches
    # for them with the operator role (mozilla-django-oidc SessionRefresh). 15 minutes by default.
    OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = env.int("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", default=15 * 60)
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
        "mozilla_django_oidc.middleware.SessionRefresh",
    )
elif not DEBUG:
    # Without OIDC, a local superuser may sign in to the admin only in development (DEBUG=True):
    # a production deployment without the provider has no admin sign-in at all (refuse by default).
    AUTHENTICATION_BACKENDS = []

# --- HTTP security of the Django side (admin sessions, CSRF, HSTS) ------------------------------
# Session and CSRF cookies are never readable by scripts; with DEBUG=False they are sent over HTTPS
# only and HSTS is on, so production must be served over TLS (directly, or behind a TLS proxy).
# TJWATER_BEHIND_TLS_PROXY=1 says a TLS-terminating proxy in front sets X-Forwarded-Proto (and strips
# it from clients): only then is that header trusted to mark a request as HTTPS. Off by default, since
# trusting it without such a proxy would let any client claim HTTPS.
# HSTS covers this host only by default: TJWATER_HSTS_INCLUDE_SUBDOMAINS=1 extends it to every
# subdomain, which is the deployment's call (a plain-HTTP service under the same name would break).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
TJWATER_BEHIND_TLS_PROXY = env.bool("TJWATER_BEHIND_TLS_PROXY", default=False)
if TJWATER_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("TJWATER_HSTS_SECONDS", default=365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("TJWATER_HSTS_INCLUDE_SUBDOMAINS", default=False)

# Content-Security-Policy (django-csp) on every Django response: scripts, styles, images and fonts only
# from this origin (the admin's and Swagger UI's files are served here: no CDN), no inline script, no
# plugins, no framing. Forms may post here and — since a form's redirect counts as its target — lead to
# the provider (signing out goes to its end-session endpoint). The one inline style the policy allows is
# Django's admin change list's (admin/change_list.html, for lists without actions), by its hash, which is
# that of the pinned Django: the browser tests report any CSP violation on the admin pages.
_ADMIN_CHANGE_LIST_STYLE = "'sha256-blvLUW3UscWqsXGByNOqdBboM+ShWAuugp2mC/wbafU='"


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


_PROVIDER_ORIGINS = sorted(
    {_origin(url) for url in (OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_END_SESSION_ENDPOINT) if _origin(url)}
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", _ADMIN_CHANGE_LIST_STYLE],
        # Swagger UI's and the admin's icons are partly data: URIs.
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'", *_PROVIDER_ORIGINS],
    }
}
# Permissions-Policy (tjwater.security): the pages need no powerful browser feature; all are denied.
TJWATER_PERMISSIONS_POLICY = (
    "accelerometer=(), autoplay=(), camera=(), display-capture=(), geolocation=(), gyroscope=(), "
    "magnetometer=(), microphone=(), midi=(), payment=(), publickey-credentials-get=(), usb=()"
)

REST_FRAMEWORK = {
    # The context API authenticates with the MCP bearer validator explicitly per view; no global
    # authenticator (SPEC R-AUTH-2).
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON only, within the bounds (depth, numbers, text): tjwater/bounds.py, issue 41.
    "DEFAULT_PARSER_CLASSES": ["tjwater.bounds.BoundedJSONParser"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# OpenAPI 3.1 of the REST API (drf-spectacular): /api/schema/, browsable at /api/docs/ with the Swagger UI
# shipped in drf-spectacular-sidecar (no CDN). The query routes' schemas come from the tool registry
# (queries.api): their result models are added as components by the post-processing hook.
SPECTACULAR_SETTINGS = {
    "TITLE": "tjwater-mcp REST API",
    "DESCRIPTION": "The same query services as /mcp, over REST: same data, same permissions (bearer JWT for "
    "the API audience; permissions from the live project membership).",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["queries.api.openapi_components"],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
}
# REST bearer tokens (SPEC §12): same issuer and validator as /mcp, their own audience and client allowlist.
TJWATER_API_AUDIENCE = env.str("TJWATER_API_AUDIENCE", default="tjwater-api")
TJWATER_API_ALLOWED_CLIENTS = env.list("TJWATER_API_ALLOWED_CLIENTS", default=TJWATER_MCP_ALLOWED_CLIENTS)

# Context handles never reach a log (R-CTX-5, SPEC §10): tjwater.logging applies LOGGING and then puts
# its RedactHandlePaths filter on the loggers that write request paths (django.request, django.server,
# uvicorn.access, uvicorn.error) and on every handler present at Django set-up — uvicorn's own
# handlers included, however the server is started (access log on or off, manage.py runserver).
LOGGING_CONFIG = "tjwater.logging.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_handle_paths": {"()": "tjwater.logging.RedactHandlePaths"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "tjwater.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if TJWATER_LOG_FORMAT == "json" else "plain",
            "filters": ["redact_handle_paths"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
