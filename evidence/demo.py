"""The demo's evidence sample (seed 001 "分页 大结果与数据语义": DEMO samples).

A DEMO sample is a snapshot the demo ships rather than one a query saved: its ``source`` is
``DEMO_SAMPLE_SOURCE``. Reading a page of it is not trusted to the page alone — ``get_task_evidence``
checks the whole document's size (8 MiB) in the database, reads it whole, verifies its RFC 8785 SHA-256
and only then selects ``data_path`` and the page (``evidence.task_tools``). A sample over the ceiling
must be split by whoever makes it; no narrower page gets around the check.

The sample is seeded by ``queries.demo.seed`` through the hook this app registers in ``ready()``
(``queries`` does not import ``evidence``): deterministic content, absolute timestamps, one row.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from contexts.models import Project, TaskRun
from evidence.models import EvidenceSnapshot
from evidence.services import canonical_json
from evidence.task_tools import DEMO_SAMPLE_SOURCE

SAMPLE_TOOL = "query_scada_readings"
SAMPLE_DEVICE = "PT-001"
SAMPLE_START = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)


def sample_document() -> dict[str, Any]:
    """A result envelope of two hours of one pressure transmitter (15-minute values), labelled a demo
    sample: deterministic, so its digest is the same in every demo."""
    points = [
        {
            "device_id": SAMPLE_DEVICE,
            "time": (SAMPLE_START + timedelta(minutes=15 * i)).isoformat().replace("+00:00", "Z"),
            "value": round(31.5 - 0.35 * i, 2),
            "quality": "good",
        }
        for i in range(8)
    ]
    return {
        "source": DEMO_SAMPLE_SOURCE,
        "source_ref": f"project:tianjin-demo/scada-readings/monitored_value?devices={SAMPLE_DEVICE}",
        "queried_at": "2026-11-01T09:00:00Z",
        "origin": "measured",
        "data": {
            "items": points,
            "device": {"device_id": SAMPLE_DEVICE, "quantity": "pressure", "unit": "m", "district": "Hexi"},
            "note": "Demo sample: pressure before and after the LINK-1523 break, shipped with the demo.",
        },
        "window": {"start": "2026-11-01T06:00:00Z", "end": "2026-11-01T08:00:00Z"},
        "units": {SAMPLE_DEVICE: "m"},
        "truncated": False,
        "data_gaps": [],
    }


def seed_demo_sample(*, project: Project) -> dict[str, int]:
    """Add the sample to the demo investigation's current run unless it is there (idempotent); returns
    the rows added."""
    run = (
        TaskRun.objects.select_related("owner")
        .filter(task__project=project, superseded_at__isnull=True, owner__isnull=False)
        .order_by("task_id")
        .first()
    )
    if run is None or EvidenceSnapshot.objects.filter(run=run, source=DEMO_SAMPLE_SOURCE).exists():
        return {"evidence_sample": 0}
    document = sample_document()
    canonical = canonical_json(document)
    EvidenceSnapshot.objects.create(
        project=project,
        task_id=run.task_id,
        run=run,
        tool=SAMPLE_TOOL,
        source=DEMO_SAMPLE_SOURCE,
        principal=run.owner,
        required_permissions=["scada.view"],
        params={"device_ids": [SAMPLE_DEVICE], "field": "monitored_value"},
        data=document,
        byte_size=len(canonical),
        sha256=hashlib.sha256(canonical).hexdigest(),
    )
    return {"evidence_sample": 1}
