"""The analysis family over real HTTP against the seeded demo (values checked against the rows in the
database), its limits and refusals, the failed run's explicit "no series", the water-age capability
gap, and the pinned query counts run synchronously."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contexts.models import Project
from contexts.scope import QueryScope
from queries.errors import AnalysisRunWithoutSeries, CapabilityGap
from queries.models import AnalysisLinkSeries, AnalysisNodeSeries, AnalysisResult, AnalysisRun
from queries.schemas.common import PageRequest
from queries.services import analysis
from tests.queries.factories import service_scope
from tests.support.demo import DEMO, DEMO_B, business_error, structured

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

Call = Callable[..., dict[str, Any]]
BURST = "burst-20261101-0800"
FAILED = "whatif-20261101-1100"
ISOLATION = "isolation-20261101-0830"
AT_0800 = datetime(2026, 11, 1, 8, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alice_scope() -> QueryScope:
    project = Project.objects.get(slug=DEMO)
    return service_scope(project, {"webgis.view", "simulation.view"})


def runs_of(slug: str) -> list[AnalysisRun]:
    return list(AnalysisRun.objects.filter(project__slug=slug).order_by("-created_at", "run_id"))


def test_list_analysis_runs_pages_the_stored_runs(demo_call: Call) -> None:
    stored = runs_of(DEMO)
    first = structured(demo_call("list_analysis_runs", {"limit": 100}))
    assert [(i["run_id"], i["kind"], i["status"], i["error_code"]) for i in first["data"]["items"]] == [
        (r.run_id, r.kind, r.status, r.error_code or None) for r in stored
    ]
    assert first["data"]["items"][0]["created_at"] == iso(stored[0].created_at)
    assert (first["data"]["total"], first["page"]["has_more"], first["origin"]) == (len(stored), False, "analysis_run")
    pages = [structured(demo_call("list_analysis_runs", {"limit": 1, "offset": k})) for k in range(len(stored))]
    assert [p["data"]["items"][0]["run_id"] for p in pages] == [r.run_id for r in stored]
    assert [p["data"]["has_more"] for p in pages] == [True] * (len(stored) - 1) + [False]
    beyond = structured(demo_call("list_analysis_runs", {"limit": 1, "offset": 10000}))
    assert (beyond["data"]["items"], beyond["data"]["has_more"]) == ([], False)


def test_analysis_run_limits_are_checked_on_the_wire(demo_call: Call) -> None:
    assert demo_call("list_analysis_runs", {"limit": 101})["error"]["code"] == -32602  # page max 100
    assert demo_call("list_analysis_runs", {"limit": 0})["error"]["code"] == -32602
    assert demo_call("list_analysis_runs", {"offset": 10001})["error"]["code"] == -32602
    assert demo_call("list_analysis_results", {"run_id": BURST, "limit": 501})["error"]["code"] == -32602
    assert structured(demo_call("list_analysis_results", {"run_id": BURST, "limit": 500}))["data"]["limit"] == 500


def test_get_analysis_run_reports_status_results_and_series(demo_call: Call) -> None:
    burst = AnalysisRun.objects.get(project__slug=DEMO, run_id=BURST)
    data = structured(demo_call("get_analysis_run", {"run_id": BURST}))["data"]
    assert (data["kind"], data["status"], data["parameters"], data["summary"]) == (
        "burst",
        "succeeded",
        burst.parameters,
        burst.summary,
    )
    types = sorted(AnalysisResult.objects.filter(run=burst).values_list("result_type", flat=True))
    assert data["result_types"] == [{"result_type": t, "count": types.count(t)} for t in sorted(set(types))]
    assert data["has_series"] is True
    failed = structured(demo_call("get_analysis_run", {"run_id": FAILED}))["data"]
    stored = AnalysisRun.objects.get(project__slug=DEMO, run_id=FAILED)
    assert (failed["status"], failed["error_code"], failed["error_message"], failed["has_series"]) == (
        "failed",
        stored.error_code,
        stored.error_message,
        False,
    )


def test_runs_of_another_project_are_not_found(demo_call: Call) -> None:
    assert business_error(demo_call("get_analysis_run", {"run_id": BURST}, who="bob", project=DEMO_B)) == "NOT_FOUND"
    other = AnalysisRun.objects.get(project__slug=DEMO_B).run_id
    assert business_error(demo_call("get_analysis_run", {"run_id": other})) == "NOT_FOUND"
    assert business_error(demo_call("list_analysis_results", {"run_id": other})) == "NOT_FOUND"
    window = {"start": "2026-11-01T08:00:00Z", "end": "2026-11-01T09:00:00Z"}
    series = {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300", "field": "pressure"}
    assert business_error(demo_call("query_analysis_series", {**series, **window}, who="bob", project=DEMO_B)) == (
        "NOT_FOUND"
    )
    values = {"run_id": BURST, "element_type": "tank", "field": "pressure", "time": "2026-11-01T08:00:00Z"}
    assert business_error(demo_call("query_analysis_values", values, who="bob", project=DEMO_B)) == "NOT_FOUND"
    mine = structured(demo_call("list_analysis_runs", {}, who="bob", project=DEMO_B))["data"]["items"]
    assert [i["run_id"] for i in mine] == [r.run_id for r in runs_of(DEMO_B)]


def test_series_need_simulation_view(demo_call: Call) -> None:
    """bob holds only webgis.view on tianjin-demo: runs yes, series no (answered as an unknown tool)."""
    assert structured(demo_call("list_analysis_runs", {}, who="bob"))["data"]["total"] == len(runs_of(DEMO))
    for tool, args in (
        ("query_analysis_series", {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300",
                                   "field": "pressure", "start": "2026-11-01T08:00:00Z",
                                   "end": "2026-11-01T09:00:00Z"}),
        ("query_analysis_values", {"run_id": BURST, "element_type": "tank", "field": "pressure",
                                   "time": "2026-11-01T08:00:00Z"}),
    ):  # fmt: skip
        reply = demo_call(tool, args, who="bob")
        assert reply["error"]["code"] == -32602 and reply["error"]["message"] == f"Unknown tool: {tool}"


def test_list_analysis_results_keeps_result_type(demo_call: Call) -> None:
    run = AnalysisRun.objects.get(project__slug=DEMO, run_id=ISOLATION)
    stored = list(AnalysisResult.objects.filter(run=run).order_by("sequence"))
    pages = [structured(demo_call("list_analysis_results", {"run_id": ISOLATION, "limit": 2, "offset": k}))
             for k in range(0, len(stored), 2)]  # fmt: skip
    items = [i for p in pages for i in p["data"]["items"]]
    assert [(i["sequence"], i["result_type"], i["payload"]) for i in items] == [
        (r.sequence, r.result_type, r.payload) for r in stored
    ]
    assert [i["element_refs"] for i in items] == [r.element_refs for r in stored]
    assert [p["data"]["total"] for p in pages] == [len(stored)] * len(pages)
    assert pages[-1]["data"]["has_more"] is False and pages[0]["data"]["has_more"] is True
    only = structured(demo_call("list_analysis_results", {"run_id": ISOLATION, "result_type": "demand_lost"}))
    assert [i["sequence"] for i in only["data"]["items"]] == [
        r.sequence for r in stored if r.result_type == "demand_lost"
    ]
    assert (only["data"]["total"], only["data"]["result_type"]) == (1, "demand_lost")
    none = structured(demo_call("list_analysis_results", {"run_id": ISOLATION, "result_type": "leak"}))
    assert (none["data"]["items"], none["data"]["total"]) == ([], 0)


def test_water_age_is_an_explicit_capability_gap(demo_call: Call) -> None:
    reply = demo_call("list_analysis_results", {"run_id": BURST, "result_type": "water_age"})
    assert business_error(reply) == "CAPABILITY_NOT_AVAILABLE"
    assert reply["result"]["structuredContent"]["details"] == {"feature": "water-age analysis"}
    series = {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300", "field": "water_age",
              "start": "2026-11-01T08:00:00Z", "end": "2026-11-01T09:00:00Z"}  # fmt: skip
    assert business_error(demo_call("query_analysis_series", series)) == "CAPABILITY_NOT_AVAILABLE"
    reply = demo_call("list_analysis_results", {"run_id": BURST, "result_type": "pipeline-health"})
    assert business_error(reply) == "CAPABILITY_NOT_AVAILABLE"
    assert reply["result"]["structuredContent"]["details"] == {"feature": "pipeline-health prediction"}


def test_query_analysis_series_returns_the_run_values(demo_call: Call) -> None:
    args = {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300", "field": "pressure",
            "start": "2026-11-01T07:00:00Z", "end": "2026-11-02T07:00:00Z"}  # fmt: skip  # exactly 24 h
    result = structured(demo_call("query_analysis_series", args))
    stored = AnalysisNodeSeries.objects.filter(
        run__project__slug=DEMO, run__run_id=BURST, element_type="junction", element_id="JUNCTION-1300",
        time__gte=datetime(2026, 11, 1, 7, tzinfo=UTC),
    ).order_by("time")  # fmt: skip
    assert result["data"]["points"] == [{"time": iso(r.time), "value": r.pressure} for r in stored]
    assert (result["origin"], result["units"], result["data"]["run_status"]) == (
        "analysis_run",
        {"pressure": "m"},
        "succeeded",
    )
    link = {**args, "element_type": "pipe", "element_id": "LINK-1523", "field": "flow", "end": "2026-11-01T09:00:00Z"}
    flows = structured(demo_call("query_analysis_series", link))["data"]["points"]
    stored_flows = AnalysisLinkSeries.objects.filter(
        run__run_id=BURST, run__project__slug=DEMO, element_id="LINK-1523",
        time__gte=datetime(2026, 11, 1, 7, tzinfo=UTC), time__lt=datetime(2026, 11, 1, 9, tzinfo=UTC),
    ).order_by("time")  # fmt: skip
    assert flows == [{"time": iso(r.time), "value": r.flow} for r in stored_flows] and len(flows) == 4  # from 08:00


def test_query_analysis_series_limits_and_refusals(demo_call: Call) -> None:
    base = {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300", "field": "pressure",
            "start": "2026-11-01T07:00:00Z"}  # fmt: skip
    assert business_error(demo_call("query_analysis_series", {**base, "end": "2026-11-02T07:00:01Z"})) == (
        "LIMIT_EXCEEDED"
    )
    assert demo_call("query_analysis_series", {**base, "end": "2026-11-01T09:00:00"})["error"]["code"] == -32602
    assert business_error(demo_call("query_analysis_series", {**base, "end": "2026-11-01T06:00:00Z"})) == (
        "INVALID_PARAMETER"
    )
    # An hour 25 passes the wire pattern; the service's parse refuses it as a client error.
    impossible = {**base, "end": "2026-11-01T25:00:00Z"}
    assert business_error(demo_call("query_analysis_series", impossible)) == "INVALID_PARAMETER"
    wrong_field = {**base, "field": "flow", "end": "2026-11-01T09:00:00Z"}
    assert business_error(demo_call("query_analysis_series", wrong_field)) == "INVALID_PARAMETER"
    missing = {**base, "element_id": "JUNCTION-NOPE", "end": "2026-11-01T09:00:00Z"}
    assert business_error(demo_call("query_analysis_series", missing)) == "NOT_FOUND"


def test_a_failed_run_says_it_has_no_series(demo_call: Call) -> None:
    """whatif-20261101-1100 failed in EPANET: asking for its series is a business error naming the
    status and error code — never an empty series that would read as "no effect"."""
    args = {"run_id": FAILED, "element_type": "pipe", "element_id": "LINK-12", "field": "flow",
            "start": "2026-11-01T11:00:00Z", "end": "2026-11-01T12:00:00Z"}  # fmt: skip
    reply = demo_call("query_analysis_series", args)
    assert business_error(reply) == "ANALYSIS_RUN_HAS_NO_SERIES"
    stored = AnalysisRun.objects.get(project__slug=DEMO, run_id=FAILED)
    assert reply["result"]["structuredContent"]["details"] == {
        "run_id": FAILED,
        "run_status": "failed",
        "error_code": stored.error_code,
    }
    values = {"run_id": FAILED, "element_type": "pipe", "field": "flow", "time": "2026-11-01T11:30:00Z"}
    assert business_error(demo_call("query_analysis_values", values)) == "ANALYSIS_RUN_HAS_NO_SERIES"


def test_outside_the_run_window_is_an_explained_gap(demo_call: Call) -> None:
    args = {"run_id": BURST, "element_type": "junction", "element_id": "JUNCTION-1300", "field": "pressure",
            "start": "2026-11-01T19:00:00Z", "end": "2026-11-01T20:00:00Z"}  # fmt: skip
    result = structured(demo_call("query_analysis_series", args))
    assert result["data"]["points"] == []
    [gap] = result["data_gaps"]
    assert "08:00Z to 2026-11-01T18:00Z" in gap["reason"]
    late = {"run_id": BURST, "element_type": "tank", "field": "pressure", "time": "2026-11-01T18:05:00Z"}
    after = structured(demo_call("query_analysis_values", late))
    assert (after["data"]["items"], after["data"]["time"], len(after["data_gaps"])) == ([], None, 1)


def test_query_analysis_values_pages_one_instant(demo_call: Call) -> None:
    """time 08:10 falls between reported instants: the run's instant at or before it (08:00) is used."""
    stored = list(
        AnalysisNodeSeries.objects.filter(run__project__slug=DEMO, run__run_id=BURST, element_type="tank", time=AT_0800)
        .order_by("element_id")
        .values_list("element_id", "pressure")
    )
    pages = []
    for offset in range(0, len(stored) + 10, 10):
        args = {"run_id": BURST, "element_type": "tank", "field": "pressure", "time": "2026-11-01T08:10:00+00:00",
                "limit": 10, "offset": offset}  # fmt: skip
        pages.append(structured(demo_call("query_analysis_values", args))["data"])
    assert [(i["element_id"], i["value"]) for p in pages for i in p["items"]] == stored
    assert {p["time"] for p in pages} == {iso(AT_0800)}
    assert {p["total"] for p in pages} == {len(stored)}
    assert [p["has_more"] for p in pages][-2:] == [False, False]


def test_pinned_query_counts(django_assert_num_queries) -> None:  # noqa: ANN001
    scope = alice_scope()
    with django_assert_num_queries(2):
        analysis.list_analysis_runs(scope=scope, page=PageRequest(limit=5))
    with django_assert_num_queries(1):
        analysis.get_analysis_run(scope=scope, run_id=BURST)
    with django_assert_num_queries(2):
        analysis.list_analysis_results(scope=scope, run_id=BURST, result_type=None, page=PageRequest())
    window = {"start": AT_0800, "end": AT_0800 + timedelta(hours=2)}
    with django_assert_num_queries(2):
        analysis.query_analysis_series(
            scope=scope, run_id=BURST, element_type="pipe", element_id="LINK-1523", field="flow", **window
        )
    with django_assert_num_queries(3):
        analysis.query_analysis_values(
            scope=scope, run_id=BURST, element_type="pipe", field="flow", time=AT_0800, page=PageRequest()
        )
    # Refusals before any series is read: the failed run costs one query, water age none.
    with django_assert_num_queries(1), pytest.raises(AnalysisRunWithoutSeries):
        analysis.query_analysis_series(
            scope=scope, run_id=FAILED, element_type="pipe", element_id="LINK-12", field="flow", **window
        )
    with django_assert_num_queries(0), pytest.raises(CapabilityGap):
        analysis.list_analysis_results(scope=scope, run_id=BURST, result_type="water_age", page=PageRequest())


# --- what a run computed from (issue 42 item 1) -------------------------------------------------------


def test_a_run_reports_the_model_version_engine_and_input_hash(demo_call: Call, django_assert_num_queries) -> None:  # noqa: ANN001
    from django.db.models import RestrictedError

    from queries.models import NetworkSource
    from queries.runs.cost import engine_version
    from queries.runs.inputs import input_sha256

    # The demo's burst is the burst kind's run on the demo's model version 1; its failed what-if was no
    # kind's run, and claims no version, engine or input hash.
    seeded = structured(demo_call("get_analysis_run", {"run_id": BURST}))["data"]  # checked against its schema
    assert (seeded["model_version"]["version"], seeded["model_version"]["file_name"]) == (1, "Net6.inp")
    assert seeded["engine"] == engine_version() and len(seeded["input_sha256"]) == 64
    failed = structured(demo_call("get_analysis_run", {"run_id": FAILED}))["data"]
    assert (failed["model_version"], failed["engine"], failed["input_sha256"], failed["progress"]) == (
        None,
        None,
        None,
        None,
    )  # fmt: skip
    project = Project.objects.get(slug=DEMO)
    version = NetworkSource.objects.create(project=project, version=7, file_name="net.inp", inp_text="[END]\n",
                                           sha256="c" * 64)  # fmt: skip
    run = AnalysisRun.objects.get(project=project, run_id=BURST)
    digest = input_sha256(kind="burst", parameters=run.parameters, model_sha256=version.sha256, engine=engine_version())
    AnalysisRun.objects.filter(pk=run.pk).update(model_version=version, engine=engine_version(), input_sha256=digest,
                                                 progress=1.0, status_message="done")  # fmt: skip
    scope = alice_scope()
    with django_assert_num_queries(1):  # the version is joined, not a second query
        data = analysis.get_analysis_run(scope=scope, run_id=BURST).data
    assert data.model_version is not None
    assert (data.model_version.version, data.model_version.sha256, data.model_version.file_name) == (
        7,
        "c" * 64,
        "net.inp",
    )
    assert (data.engine, data.input_sha256, data.progress, data.status_message) == (
        engine_version(),
        digest,
        1.0,
        "done",
    )
    with pytest.raises(RestrictedError):  # a version a run names is never deleted
        version.delete()
