#!/usr/bin/env bash
# Runs the demo service in the foreground: uvicorn, a Celery worker and Celery beat. Ctrl-C stops all.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-8000}
# The demo configuration, passed here explicitly (setup writes no .env; settings read a .env only if
# the operator created one, and these process variables take precedence over it).
export DEBUG=${DEBUG:-1}
export TJWATER_MCP_ENABLED=${TJWATER_MCP_ENABLED:-1}
export TJWATER_DEV_ISSUER=${TJWATER_DEV_ISSUER:-1}
export TJWATER_MCP_ANALYSIS_TOOLS=${TJWATER_MCP_ANALYSIS_TOOLS:-1}
export TJWATER_MCP_RESOURCE_URI=${TJWATER_MCP_RESOURCE_URI:-http://127.0.0.1:$PORT/mcp}
mkdir -p var

# N server processes share their metrics through files (tjwater/metrics.py): a fresh directory per start,
# shared with the Celery worker so its task outcomes appear on /metrics too.
if [ "${TJWATER_WORKERS:-1}" -gt 1 ] && [ -z "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
  export PROMETHEUS_MULTIPROC_DIR="$PWD/var/prometheus"
fi
if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
  rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
fi

pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

.venv/bin/celery -A tjwater worker --loglevel=INFO --concurrency=2 & pids+=($!)
# Analysis runs have a queue of their own (issue 42): one worker process per core at most, a fresh child
# after 20 runs, and one replaced once it has grown past the memory cap (checked after each run).
.venv/bin/celery -A tjwater worker -Q analysis -n analysis@%h --loglevel=INFO --concurrency=1 \
  --max-tasks-per-child=20 --max-memory-per-child="${TJWATER_ANALYSIS_MAX_MEMORY_KB:-2000000}" & pids+=($!)
.venv/bin/celery -A tjwater beat --loglevel=INFO --schedule var/celerybeat-schedule & pids+=($!)
# With the access log: the context REST API carries a handle in the DELETE path, and the project's
# logging filter (tjwater/logging.py) redacts it in every logger, uvicorn's access log included.
# TJWATER_WORKERS server processes (default 1): limits, contexts and keys live in Redis/PostgreSQL, so
# they hold across processes. Each process keeps TJWATER_MCP_DB_POOL_SIZE + TJWATER_DB_POOL_MAX database
# connections at most (README "Scale out").
.venv/bin/uvicorn tjwater.asgi:application --host 127.0.0.1 --port "$PORT" --lifespan on \
  --workers "${TJWATER_WORKERS:-1}" & pids+=($!)

cat <<MSG

  tjwater-mcp is starting on http://127.0.0.1:$PORT
    health:  curl http://127.0.0.1:$PORT/healthz
    MCP:     http://127.0.0.1:$PORT/mcp
    token:   scripts/dev manage.py mcp_token --sub alice --client tjwater-agent-mcp --scope "mcp.catalog.read mcp.query mcp.context.bind"
    client:  scripts/dev scripts/example_client.py --url http://127.0.0.1:$PORT
  Ctrl-C stops the server, the worker and beat.

MSG
wait -n "${pids[@]}"
