#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine (as root) or this one: system packages, services,
# the virtualenv, the database with PostGIS, and migrations. Used by `make run` and `make test`.
#   SETUP_DB_NAME   database to create and migrate (default tjwater)
#   SETUP_SKIP_DEMO set to 1 to skip loading demo data
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

PYTHON=${PYTHON:-python3}
DB_NAME=${SETUP_DB_NAME:-tjwater}
PG_VERSION=15
APT_UPDATED=0

need_root() {
  [[ $(id -u) -eq 0 ]] || die "installing $1 needs root (run as root, or install it yourself: apt-get install -y $1)"
}
apt_install() {
  need_root "$*"
  if [[ $APT_UPDATED -eq 0 ]]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
  say "installing system packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# --- PostgreSQL + PostGIS ------------------------------------------------------------------------
if ! command -v pg_lsclusters >/dev/null 2>&1; then
  apt_install postgresql-$PG_VERSION
fi
if ! have_pkg postgresql-$PG_VERSION-postgis-3; then
  apt_install postgresql-$PG_VERSION-postgis-3
fi
# GDAL's command-line tools (ogr2ogr): the tests write real GeoPackages and Shapefiles with them for
# import_gis (the library itself comes with PostGIS; GeoDjango only reads).
if ! have_pkg gdal-bin; then
  apt_install gdal-bin
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  say "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
  pg_isready -h 127.0.0.1 -p 5432 -q || die "PostgreSQL did not start on 127.0.0.1:5432"
fi

# --- Redis ---------------------------------------------------------------------------------------
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
# openssl makes the self-signed certificate of the limiter's TLS test (tests/mcp_app/test_limits.py).
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.25; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "Redis did not start on 127.0.0.1:6379"
fi

# --- nginx and iproute2 (the several-hosts simulation of `make resilience`) -------------------------
# tests/resilience/test_several_hosts.py runs app hosts in network namespaces (`ip netns`, iproute2)
# behind Debian's nginx as the load balancer: the test starts its own nginx on a free port with its own
# pid, log and temp paths, so Debian's nginx service must not run (it would hold port 80): a policy-rc.d
# refuses service starts for the install's duration, and the service is then disabled.
if ! command -v ip >/dev/null 2>&1; then
  apt_install iproute2
fi
if ! have_pkg nginx; then
  POLICY_RC=/usr/sbin/policy-rc.d
  if [[ -e $POLICY_RC ]]; then
    apt_install nginx
  else
    printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC" && chmod 755 "$POLICY_RC"
    trap 'rm -f "$POLICY_RC"' EXIT
    apt_install nginx
    rm -f "$POLICY_RC" && trap - EXIT
  fi
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    systemctl disable --now nginx >/dev/null 2>&1 || true
  elif command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d nginx disable >/dev/null 2>&1 || true
  fi
fi

# --- Chromium (the browser tests drive Debian's build through playwright-core in devtools/) ----------
if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium
fi

# --- Python virtualenv ---------------------------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
# From the locks, hash-checked: every transitive dependency pinned with the hashes of its files
# (requirements*.txt are the human-edited lists; scripts/lock.sh regenerates the locks from them).
REQ_HASH=$(cat requirements.lock requirements-dev.lock | sha256sum | cut -c1-16)
if [[ ! -f .venv/.req-$REQ_HASH ]]; then
  say "installing Python requirements (requirements.lock, requirements-dev.lock)"
  .venv/bin/pip install -q --disable-pip-version-check --require-hashes -r requirements.lock -r requirements-dev.lock
  rm -f .venv/.req-* && touch ".venv/.req-$REQ_HASH"
fi

# --- Node tools (conformance suite, OpenID provider) when the project has them -------------------
if [[ -f devtools/package.json ]]; then
  LOCK_HASH=$(sha256sum devtools/package-lock.json | cut -c1-16)
  if [[ ! -f devtools/node_modules/.lock-$LOCK_HASH ]]; then
    command -v npm >/dev/null 2>&1 || apt_install nodejs npm
    say "installing Node tools (devtools/)"
    (cd devtools && npm ci --no-audit --no-fund --loglevel=error)
    touch "devtools/node_modules/.lock-$LOCK_HASH"
  fi
  # The conformance suite and the Inspector need Node 22: the pinned `node` package provides it.
  [[ $(devtools/node_modules/.bin/node --version 2>/dev/null) == v22.* ]] \
    || die "devtools/node_modules/.bin/node is not Node 22 (rm -rf devtools/node_modules and rerun)"
fi

# --- Local configuration --------------------------------------------------------------------------
# Setup never writes a .env: settings read one only if the operator created it, and the demo
# configuration (DEBUG, MCP endpoint, dev issuer) is passed by scripts/run.sh in its own environment.
# Earlier versions of this script wrote a demo .env into the checkout; remove it if it is exactly that
# file (an operator's own .env is never touched), so a deployment from this tree cannot pick it up.
LEGACY_DEMO_ENV=$'# Local demo configuration written by scripts/setup.sh. Not for production: see .env.example.\nDEBUG=1\nTJWATER_MCP_ENABLED=1\nTJWATER_DEV_ISSUER=1'
if [[ -f .env && $(cat .env) == "$LEGACY_DEMO_ENV" ]]; then
  say "removing the demo .env an earlier setup wrote (make run passes the demo configuration itself)"
  rm -f .env
fi

# --- Database ------------------------------------------------------------------------------------
psql_admin() { PGOPTIONS="-c client_min_messages=warning" psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
# The test suite runs about 20 server processes at once, each with its own connection pools (mcp_app
# query pool + Django's): a local server needs more than PostgreSQL's default 100 connections.
MIN_CONNECTIONS=300
if (( $(psql_admin -d postgres -c "SHOW max_connections") < MIN_CONNECTIONS )); then
  say "raising PostgreSQL max_connections to $MIN_CONNECTIONS (restarts the local server)"
  psql_admin -d postgres -c "ALTER SYSTEM SET max_connections = $MIN_CONNECTIONS"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main restart
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
  pg_isready -h 127.0.0.1 -p 5432 -q || die "PostgreSQL did not come back after the restart"
fi
if [[ -z $(psql_admin -d postgres -c "SELECT 1 FROM pg_database WHERE datname='$DB_NAME'") ]]; then
  say "creating database $DB_NAME"
  psql_admin -d postgres -c "CREATE DATABASE \"$DB_NAME\""
fi
psql_admin -d "$DB_NAME" -c "CREATE EXTENSION IF NOT EXISTS postgis"

export DATABASE_URL=${DATABASE_URL:-postgis://postgres@127.0.0.1:5432/$DB_NAME}
# Setup's own manage.py runs use the local demo configuration (as make run does), passed to them alone:
# settings refuse DEBUG=False without a real SECRET_KEY, and the demo principals belong to the dev issuer.
# An operator's own environment (DEBUG, TJWATER_DEV_ISSUER set) wins.
dev_manage() { DEBUG=${DEBUG:-1} TJWATER_DEV_ISSUER=${TJWATER_DEV_ISSUER:-1} .venv/bin/python manage.py "$@"; }
say "migrating $DB_NAME"
dev_manage migrate --noinput -v 0
# Static files (admin, Swagger UI) into var/static, hashed and compressed; WhiteNoise serves them.
say "collecting static files"
dev_manage collectstatic --noinput -v 0

if [[ ${SETUP_SKIP_DEMO:-0} != 1 ]] && dev_manage help seed_demo >/dev/null 2>&1; then
  say "loading demo data if the database has none"
  dev_manage seed_demo --if-empty
fi
say "ready"
