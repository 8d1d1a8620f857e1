"""The floor of a call that saves evidence (``scripts/bench_floor.EvidenceSteps``): besides the query it claims a
receipt and saves the snapshot on every run, with the product's own SQL and parameters — on committed rows of an
investigation of its own (the writes go through a connection of their own, so nothing can be a test
transaction; ``tests/evidence/conftest.py`` explains the world). No speed is asserted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evidence.models import EvidenceSnapshot, QueryReceipt
from evidence.services import canonical_json, saved_document
from scripts import bench_floor
from tests.evidence.factories import EvidenceWorld, evidence_world

ARGS = {"element_type": "junction", "element_id": "JUNCTION-0"}


@pytest.fixture(scope="module")
def world(db_unblocked: None) -> Iterator[EvidenceWorld]:
    with evidence_world() as built:
        yield built


def test_the_floor_of_a_saving_call_claims_and_saves_on_every_run(world: EvidenceWorld) -> None:
    inv = world.investigation()
    scope = world.bind("task_execution", investigation=inv)
    with pytest.raises(ValueError, match="writable connection"):
        bench_floor.capture("get_element_properties", scope, ARGS)
    with bench_floor.connect_writer() as writer, bench_floor.connect() as conn:
        captured = bench_floor.capture("get_element_properties", scope, ARGS, writer)
        assert captured.evidence is not None and len(captured.statements) == 1  # the query itself
        floor = bench_floor.measure(captured, conn, runs=3, warmup=1)
    assert floor.p50_ms > floor.json_ms > 0 and floor.statements == 1

    receipts = list(QueryReceipt.objects.filter(task=inv.task).values("state", "request_key", "snapshot_id"))
    assert len(receipts) == 4  # the warm-up and the three runs: a fresh request key each
    assert len({r["request_key"] for r in receipts}) == 4
    assert all(r["state"] == QueryReceipt.State.COMPLETE and r["snapshot_id"] for r in receipts)
    saved = saved_document(captured.structured)
    snapshots = EvidenceSnapshot.objects.filter(task=inv.task, run=inv.run)
    assert sorted(str(s.pk) for s in snapshots) == sorted(str(r["snapshot_id"]) for r in receipts)
    assert all(canonical_json(s.data) == canonical_json(saved) for s in snapshots)


def test_a_call_that_saves_nothing_has_no_evidence_steps(world: EvidenceWorld) -> None:
    scope = world.bind("ordinary_chat")
    with bench_floor.connect_writer() as writer:
        captured = bench_floor.capture("get_element_properties", scope, ARGS, writer)
    assert captured.evidence is None
