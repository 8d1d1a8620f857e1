"""The canonical inputs of a run and their SHA-256 (issue 42 item 1, R-RUN-1): the kind, the validated
parameters, the model version's SHA-256 and the engine, serialised as RFC 8785 (JSON Canonicalization
Scheme) — the same bytes for the same question whatever the key order or number spelling of the request —
so a run reports what it computed from, and the same question on the same model is recognised
(idempotency, issue 42 item 5)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import rfc8785


def canonical_inputs(*, kind: str, parameters: Mapping[str, Any], model_sha256: str, engine: str) -> bytes:
    """The RFC 8785 bytes of a run's inputs. ``parameters`` are the validated ones (defaults filled in),
    so two requests that mean the same run have the same bytes."""
    return rfc8785.dumps({"kind": kind, "parameters": dict(parameters), "model_sha256": model_sha256, "engine": engine})


def input_sha256(*, kind: str, parameters: Mapping[str, Any], model_sha256: str, engine: str) -> str:
    """SHA-256 (hex) of ``canonical_inputs``."""
    data = canonical_inputs(kind=kind, parameters=parameters, model_sha256=model_sha256, engine=engine)
    return hashlib.sha256(data).hexdigest()
