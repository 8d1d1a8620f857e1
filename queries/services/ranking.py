"""The ranking family: the server does the searching, in SQL, bounded.

``rank_model_baseline``: the N lowest or highest values of one baseline field among the elements of a
type at one instant (optionally in an ``area``) — ``ORDER BY value, element_id LIMIT N`` on the
``(project, type, time)`` btree, instead of pages of every element in id order.

``rank_scada_deviation``: devices of one quantity ranked by how far their *cleaned* readings depart from
the model baseline at their element over a window (≤ 24 h). Each reading is compared with the baseline
linearly interpolated at its time between the instants at or before and at or after it (two btree probes
per reading); a reading outside the baseline's coverage has no comparison and is left out, and a device
with nothing compared is listed as unranked with the reason — missing coverage is never read as zero
deviation. Quantities: pressure → the junction's baseline pressure, level → the tank's baseline
pressure (level above its bottom, m), flow → the pipe's baseline flow (signed, m³/s).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet

from contexts.errors import InvalidParameter, LimitExceeded
from contexts.scope import QueryScope
from queries.models import ELEMENT_MODELS, LinkBaseline, NodeBaseline, ScadaDevice, ScadaReading
from queries.paging import collection, page_of
from queries.plan import Plan, Raw, service, statement_factory
from queries.schemas.common import PageInfo, PageRequest, TimeWindow
from queries.schemas.ranking import (
    BaselineRanking,
    BaselineRankingResult,
    DeviationRanking,
    DeviationRankingResult,
    DeviceDeviation,
    RankedValue,
    UnrankedDevice,
)
from queries.services.area import device_area, element_area, parse_area, resolve_area
from queries.services.baseline import _aware, _check_fields, _instant, _model, _units, type_instants
from queries.services.scada import time_window

MAX_RANK = 50
DEFAULT_RANK = 10
#: Devices compared in one call (each reading costs two index probes): more → narrow with ``area``.
MAX_DEVICES = 200
MAX_UNRANKED = 20
ORDERS = ("asc", "desc")
QUANTITIES = ("pressure", "flow", "level")
_BASELINE_OF = {
    "pressure": (NodeBaseline, "pressure"),
    "level": (NodeBaseline, "pressure"),
    "flow": (LinkBaseline, "flow"),
}


def _check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RANK:
        raise InvalidParameter(f"limit must be an integer from 1 to {MAX_RANK}.", details={"field": "limit"})
    checked: int = limit
    return checked


@collection(static=4)
def _ranked(
    element_type: str, field: str, order: str, area_kind: str, project_id: int, time: datetime, *area: Any
) -> QuerySet[Any]:
    """The elements' values of ``field`` at the instant ``time`` (in the area of ``area_kind`` with the
    values ``area``, or all), in rank order (ties by id). Counted and read as statement factories
    (``queries.paging.collection``): the area is a subquery the shape cache cannot key, and the ORM
    built and compiled both statements on every call (55 % of a call, mcp_app/README.md "Measuring")."""
    ranked = _model(element_type).objects.filter(
        project_id=project_id, element_type=element_type, time=time, **{f"{field}__isnull": False}
    )
    if area_kind != "all":
        inside = ELEMENT_MODELS[element_type].objects.filter(
            element_area(area_kind, project_id, element_type, *area), project_id=project_id
        )
        ranked = ranked.filter(element_id__in=inside.values("element_id"))
    return ranked.order_by(field if order == "asc" else f"-{field}", "element_id").values_list("element_id", field)


@service
def rank_model_baseline(
    *,
    scope: QueryScope,
    element_type: str,
    field: str,
    time: datetime,
    order: str = "asc",
    limit: int = DEFAULT_RANK,
    area: Mapping[str, Any] | None = None,
) -> Plan[BaselineRankingResult]:
    """The ``limit`` (≤ 50) lowest (``asc``) or highest (``desc``) values of a baseline field among the
    elements of a type at the instant at or nearest before ``time``, optionally in an area; ties by id.

    Four queries: the area (district or polygon; none for a circle), the instant, the count, the ranking."""
    _check_fields(element_type, [field])
    if order not in ORDERS:
        raise InvalidParameter("order must be asc or desc.", details={"field": "order"})
    limit = _check_limit(limit)
    asked = _aware(time)
    where = yield from resolve_area(scope.project_id, parse_area(area))
    instants = yield type_instants(element_type, (), scope.project_id, asked)
    instant = _instant(instants, asked, f"{element_type} elements")["time"]
    shape = (element_type, field, order, where.kind if where else "all")
    values = (scope.project_id, instant, *(where.values() if where else ()))
    total, rows, has_more = yield from page_of(_ranked, shape, values, PageRequest(limit=limit, max_limit=limit))
    items = [RankedValue(element_id=e, value=v) for e, v in rows]
    data = BaselineRanking(
        items=items,
        total=total,
        limit=limit,
        offset=0,
        has_more=has_more,
        element_type=element_type,  # type: ignore[arg-type]  # checked by _check_fields
        field=field,  # type: ignore[arg-type]  # checked by _check_fields
        order=order,  # type: ignore[arg-type]  # checked above
        requested_time=asked,
        time=instant,
        area=where.as_dict() if where else None,
    )
    return BaselineRankingResult(
        source="model_baseline",
        source_ref=f"project:{scope.project_slug}/model-baseline/{element_type}/{field}@{instant.isoformat()}"
        f"?rank={order}" + (f"&{where.ref()}" if where else ""),
        queried_at=datetime.now(UTC),
        origin="model_baseline",
        data=data,
        window=TimeWindow(start=instant, end=instant),
        units=_units(element_type, [field]),
        page=data.info(),
        # A district with none of these elements says so (issue 40 item 6), not just an empty list.
        data_gaps=[where.gap(element_type)] if where and where.lacks(element_type) else [],
    )


def _deviation_sql(quantity: str) -> str:
    """Per device (the ids given, ≤ ``MAX_DEVICES``): its cleaned readings in ``[start, end)``, each with
    the baseline at its element interpolated at its time (instants at or before / at or after it, one
    btree probe each), aggregated. A reading without both instants is not compared."""
    model, column = _BASELINE_OF[quantity]
    baseline = model._meta.db_table
    device, reading = ScadaDevice._meta.db_table, ScadaReading._meta.db_table
    return f"""
WITH dev AS MATERIALIZED (
    SELECT id, device_id FROM {device} WHERE project_id = %s AND id = ANY (%s)
), r AS (
    SELECT dev.device_id, x.time, x.cleaned_value AS v, b0.time AS t0, b0.v AS v0, b1.time AS t1, b1.v AS v1
    FROM {reading} x
    JOIN dev ON dev.id = x.device_id
    JOIN {device} d ON d.id = x.device_id
    LEFT JOIN LATERAL (
        SELECT time, {column} AS v FROM {baseline}
        WHERE project_id = d.project_id AND element_type = d.element_type AND element_id = d.element_id
          AND time <= x.time
        ORDER BY time DESC LIMIT 1
    ) b0 ON true
    LEFT JOIN LATERAL (
        SELECT time, {column} AS v FROM {baseline}
        WHERE project_id = d.project_id AND element_type = d.element_type AND element_id = d.element_id
          AND time >= x.time
        ORDER BY time LIMIT 1
    ) b1 ON true
    WHERE x.device_id = ANY (ARRAY(SELECT id FROM dev)) AND x.time >= %s AND x.time < %s
      AND x.cleaned_value IS NOT NULL
), c AS (
    SELECT device_id, time, t0, t1,
           v - CASE WHEN t1 = t0 THEN v0
                    ELSE v0 + (v1 - v0) * extract(epoch FROM time - t0) / extract(epoch FROM t1 - t0) END AS diff
    FROM r
)
SELECT device_id, count(*) AS readings,
       count(diff) AS compared,
       avg(abs(diff)) AS mean_abs,
       max(abs(diff)) AS max_abs,
       (array_agg(time ORDER BY abs(diff) DESC, time) FILTER (WHERE diff IS NOT NULL))[1] AS max_at,
       avg(diff) AS mean_diff,
       min(t0) FILTER (WHERE diff IS NOT NULL) AS b_start,
       max(t1) FILTER (WHERE diff IS NOT NULL) AS b_end
FROM c GROUP BY device_id
ORDER BY device_id
LIMIT %s
"""  # noqa: S608 - table and column names are constants of this module; every value is a parameter


_DEVIATION_SQL = {q: _deviation_sql(q) for q in QUANTITIES}
_DEVIATION_COLUMNS = (
    "device_id", "readings", "compared", "mean_abs", "max_abs", "max_at", "mean_diff", "b_start", "b_end",
)  # fmt: skip


@statement_factory(static=1)
def _devices_of(area_kind: str, project_id: int, quantity: str, *area: Any) -> QuerySet[Any]:
    """The devices measuring ``quantity`` (in the area of ``area_kind`` with the values ``area``, or all) in
    device-id order, one more than ``MAX_DEVICES``: a statement factory (the area is a subquery or a GIS
    function the shape cache cannot key; compiled once per kind of area, then bound)."""
    devices = ScadaDevice.objects.filter(project_id=project_id, quantity=quantity)
    if area_kind != "all":
        devices = devices.filter(device_area(area_kind, project_id, *area))
    return devices.order_by("device_id").values_list(
        "id", "device_id", "unit", "element_type", "element_id", "sample_interval_s"
    )[: MAX_DEVICES + 1]


@service
def rank_scada_deviation(
    *,
    scope: QueryScope,
    start: datetime,
    end: datetime,
    quantity: str,
    limit: int = DEFAULT_RANK,
    area: Mapping[str, Any] | None = None,
) -> Plan[DeviationRankingResult]:
    """Devices measuring ``quantity`` (in ``area`` when given) ranked by the mean absolute difference
    between their cleaned readings in ``[start, end)`` (≤ 24 h) and the model baseline at their element,
    descending, ties by device id; the ``limit`` (≤ 50) first, with worst difference, units and coverage.

    Three queries (four with a district or polygon area): the area, the devices (more than
    ``MAX_DEVICES`` → ``LimitExceeded``), the comparison."""
    if quantity not in QUANTITIES:
        raise InvalidParameter("quantity must be pressure, flow or level.", details={"field": "quantity"})
    limit = _check_limit(limit)
    window = time_window(start, end, timezone=scope.timezone)
    where = yield from resolve_area(scope.project_id, parse_area(area))
    listed = yield _devices_of(
        where.kind if where else "all", scope.project_id, quantity, *(where.values() if where else ())
    )
    if len(listed) > MAX_DEVICES:
        raise LimitExceeded(
            f"More than {MAX_DEVICES} {quantity} devices to compare; narrow with area.", details={"field": "area"}
        )
    rows = []
    if listed:
        rows = yield Raw(
            _DEVIATION_SQL[quantity],
            [scope.project_id, [pk for pk, *_ in listed], window.start, window.end, len(listed)],
            _DEVIATION_COLUMNS,
        )
    by_id = {r["device_id"]: r for r in rows}
    seconds = (window.end - window.start).total_seconds()
    compared: list[DeviceDeviation] = []
    unranked: list[UnrankedDevice] = []
    for _pk, device_id, unit, element_type, element_id, interval in listed:
        r = by_id.get(device_id)
        if r is None or not r["compared"]:
            unranked.append(
                UnrankedDevice(
                    device_id=device_id,
                    readings=int(r["readings"]) if r else 0,
                    reason="no model baseline at the readings' times" if r else "no cleaned readings in the window",
                )
            )
            continue
        compared.append(
            DeviceDeviation(
                device_id=device_id,
                element_type=element_type,
                element_id=element_id,
                unit=unit,
                mean_abs_diff=float(r["mean_abs"]),
                max_abs_diff=float(r["max_abs"]),
                max_abs_diff_at=r["max_at"],
                mean_diff=float(r["mean_diff"]),
                readings=int(r["readings"]),
                expected_readings=int(seconds // max(interval, 1)),
                compared=int(r["compared"]),
                baseline_start=r["b_start"],
                baseline_end=r["b_end"],
            )
        )
    compared.sort(key=lambda d: (-d.mean_abs_diff, d.device_id))
    items = compared[:limit]
    data = DeviationRanking(
        items=items,
        total=len(compared),
        limit=limit,
        offset=0,
        has_more=len(items) < len(compared),
        quantity=quantity,  # type: ignore[arg-type]  # checked above
        area=where.as_dict() if where else None,
        devices=len(listed),
        unranked=unranked[:MAX_UNRANKED],
        unranked_total=len(unranked),
    )
    units = {"mean_abs_diff": "device unit", "max_abs_diff": "device unit", "mean_diff": "device unit"}
    units.update({d.device_id: d.unit for d in items})
    result = DeviationRankingResult(
        source="scada",
        source_ref=f"project:{scope.project_slug}/scada-deviation/{quantity}?cleaned_value-vs-model_baseline"
        + (f"&{where.ref()}" if where else ""),
        queried_at=datetime.now(UTC),
        origin="cleaned",
        data=data,
        window=window,
        units=units,
        page=PageInfo(total=data.total, limit=limit, offset=0, has_more=data.has_more),
        data_gaps=[where.gap(f"{quantity} device")] if where and where.district and not listed else [],
    )
    result._device_quantities = {d.device_id: quantity for d in items}  # converted by present
    return result
