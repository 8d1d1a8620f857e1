#!/usr/bin/env bash
# Regenerates requirements.lock and requirements-dev.lock — every transitive dependency pinned, with the
# sha256 of every file PyPI publishes for it — from the human-edited requirements.txt and
# requirements-dev.txt (issue 18 §6). scripts/setup.sh installs the locks with `pip --require-hashes`.
#
# Versions already in a lock are kept (uv prefers them); a changed pin in requirements*.txt moves only that
# package (and what it needs). Extra arguments go to both compiles, e.g. `--upgrade-package pydantic`.
# Resolved universally (any OS, CPython >= 3.11; environment markers keep what does not apply here, such as
# async-timeout below Python 3.11.3, from being installed) against PyPI itself, so the hashes match
# PyPI's files and any mirror of them. The dev lock is constrained by the runtime lock: a package both
# need has one version and the same hashes in both.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
UV=$(command -v uv || true)
if [[ -z $UV || $("$UV" --version) != "uv $UV_VERSION"* ]]; then
  if [[ ! -x var/uv/bin/uv || $(var/uv/bin/uv --version) != "uv $UV_VERSION"* ]]; then
    python3 -m venv var/uv
    var/uv/bin/pip install -q --disable-pip-version-check "uv==$UV_VERSION"
  fi
  UV=var/uv/bin/uv
fi

COMMON=(--universal --generate-hashes --python-version 3.11 --index-url https://pypi.org/simple --no-config --quiet)
"$UV" pip compile requirements.txt "${COMMON[@]}" "$@" -o requirements.lock
"$UV" pip compile requirements-dev.txt "${COMMON[@]}" "$@" -c requirements.lock -o requirements-dev.lock
