"""Reading an analysis run's results inside an investigation saves evidence exactly once (R-RUN-6,
R-EVID) and the snapshot carries the run it read, the run's model version and the hash of its canonical
inputs (R-RUN-1, issue 42 item 7) — null for a run no engine computed (the demo's). On committed rows with
the real evidence path (``run_with_evidence``), like the other evidence tests."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from contexts.errors import NotFound
from contexts.scope import QueryScope
from evidence.models import EvidenceSnapshot
from evidence.services import REQUEST_KEY_META
from queries.importer.epanet import add_model_version
from queries.models import AnalysisResult, AnalysisRun, NetworkSource
from tests.evidence.factories import EvidenceWorld, Investigation, run_evidence_call
from tests.evidence.test_services import query

HANDLE = "h" * 43
DEMO_BURST = "burst-20261101-0800"
INPUTS = hashlib.sha256(b"the run's canonical inputs").hexdigest()


@pytest.fixture
def fresh(world: EvidenceWorld) -> Investigation:
    return world.investigation()


@pytest.fixture
def computed(world: EvidenceWorld) -> Iterator[AnalysisRun]:
    """A run of the demo project pinned to a model version of its own, with one result (committed, and
    removed again with the version)."""
    version = add_model_version(project_id=world.demo.pk, file_name="evid.inp", inp_text="[TITLE]\n",
                                imported_by="test")  # fmt: skip
    run = AnalysisRun.objects.create(
        project=world.demo, run_id=f"burst-evid-{uuid.uuid4().hex[:8]}", kind="burst", status="succeeded",
        model_version=version, engine="EPANET 2.2.0", input_sha256=INPUTS,
    )  # fmt: skip
    AnalysisResult.objects.create(run=run, sequence=1, result_type="leak", payload={"volume_lost": 1.0})
    yield run
    EvidenceSnapshot.objects.filter(analysis_run=run).delete()
    AnalysisRun.objects.filter(pk=run.pk).delete()
    NetworkSource.objects.filter(pk=version.pk).delete()


def read(scope: QueryScope, tool: str, arguments: dict[str, Any], key: str, runs: list[int]) -> dict[str, Any]:
    args = {"context_handle": HANDLE, **arguments}
    return run_evidence_call(
        scope=scope,
        tool=_spec(tool),
        arguments=args,
        meta={REQUEST_KEY_META: key},
        execute=query(scope, tool, args, runs=runs),
    )


def _spec(tool: str) -> Any:
    from queries.registry import tools_by_name

    return tools_by_name()[tool]


def saved(inv: Investigation) -> list[dict[str, Any]]:
    rows = EvidenceSnapshot.objects.filter(task=inv.task).exclude(source="demo_sample").order_by("created_at")
    return list(rows.values("id", "tool", "analysis_run_id", "model_version_id", "input_sha256"))


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("get_analysis_run", {}), ("list_analysis_results", {"limit": 5})],
)
def test_a_read_of_a_computed_run_is_saved_once_with_its_model_version_and_input_hash(
    tool: str, arguments: dict[str, Any], world: EvidenceWorld, fresh: Investigation, computed: AnalysisRun
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    runs: list[int] = []
    first = read(scope, tool, {"run_id": computed.run_id, **arguments}, "k-1", runs)
    again = read(scope, tool, {"run_id": computed.run_id, **arguments}, "k-1", runs)
    assert again["evidence_id"] == first["evidence_id"] and runs == [1]  # exactly once: no second query
    [snapshot] = saved(fresh)
    assert str(snapshot["id"]) == first["evidence_id"] and snapshot["tool"] == tool
    assert snapshot["analysis_run_id"] == computed.pk
    assert (snapshot["model_version_id"], snapshot["input_sha256"]) == (computed.model_version_id, INPUTS)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("query_analysis_values", {"element_type": "junction", "field": "pressure", "time": "2026-11-01T09:00:00Z"}),
        (
            "query_analysis_series",
            {"element_type": "junction", "element_id": "JUNCTION-1304", "field": "pressure",
             "start": "2026-11-01T07:00:00Z", "end": "2026-11-01T10:00:00Z"},
        ),
    ],
)  # fmt: skip
def test_a_read_of_the_demos_run_links_it_with_its_model_version(
    tool: str, arguments: dict[str, Any], world: EvidenceWorld, fresh: Investigation
) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    read(scope, tool, {"run_id": DEMO_BURST, **arguments}, "k-demo", [])
    demo_run = AnalysisRun.objects.get(project=world.demo, run_id=DEMO_BURST)
    [snapshot] = saved(fresh)
    assert snapshot["analysis_run_id"] == demo_run.pk  # the run of the call's own project
    # The demo's burst is the burst kind's own run on the demo's model version 1.
    assert snapshot["model_version_id"] == demo_run.model_version_id is not None
    assert snapshot["input_sha256"] == demo_run.input_sha256 and len(demo_run.input_sha256) == 64


def test_other_reads_link_no_run_and_an_unknown_run_saves_nothing(world: EvidenceWorld, fresh: Investigation) -> None:
    scope = world.bind("task_execution", investigation=fresh)
    read(scope, "list_analysis_runs", {"limit": 2}, "k-list", [])
    [snapshot] = saved(fresh)
    assert (snapshot["analysis_run_id"], snapshot["model_version_id"], snapshot["input_sha256"]) == (None, None, None)
    with pytest.raises(NotFound):
        read(scope, "get_analysis_run", {"run_id": "no-such-run"}, "k-missing", [])
    assert len(saved(fresh)) == 1
