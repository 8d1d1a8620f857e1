"""A run's canonical inputs (issue 42 item 1): RFC 8785 bytes, so the same question hashes the same
whatever the key order or number spelling, and any change of kind, parameter, model or engine does not."""

from __future__ import annotations

import hashlib
import json

from queries.runs.inputs import canonical_inputs, input_sha256

BASE = {"kind": "burst", "model_sha256": "a" * 64, "engine": "EPANET 2.2.0 (WNTR 1.5.0)"}


def test_the_same_question_has_the_same_hash() -> None:
    one = json.loads(
        '{"pipe_id": "P-1", "position": 0.5, "start": "2026-11-01T08:00:00+00:00", "duration_minutes": 60}'
    )
    two = json.loads(
        '{"duration_minutes": 60.0, "start": "2026-11-01T08:00:00+00:00", "position": 5e-1, "pipe_id": "P-1"}'
    )
    assert canonical_inputs(parameters=one, **BASE) == canonical_inputs(parameters=two, **BASE)
    assert input_sha256(parameters=one, **BASE) == hashlib.sha256(canonical_inputs(parameters=two, **BASE)).hexdigest()
    # The bytes are JCS: sorted keys, no spaces, shortest number form.
    assert canonical_inputs(parameters={"b": 1.0, "a": [2, "x"]}, **BASE).startswith(
        b'{"engine":"EPANET 2.2.0 (WNTR 1.5.0)","kind":"burst","model_sha256":"'
    )
    assert b'"parameters":{"a":[2,"x"],"b":1}' in canonical_inputs(parameters={"b": 1.0, "a": [2, "x"]}, **BASE)


def test_any_change_changes_the_hash() -> None:
    params = {"pipe_id": "P-1", "position": 0.5}
    seen = {
        input_sha256(parameters=params, **BASE),
        input_sha256(parameters={**params, "position": 0.25}, **BASE),
        input_sha256(parameters=params, **{**BASE, "kind": "simulation"}),
        input_sha256(parameters=params, **{**BASE, "model_sha256": "b" * 64}),
        input_sha256(parameters=params, **{**BASE, "engine": "EPANET 2.3.0"}),
    }
    assert len(seen) == 5
