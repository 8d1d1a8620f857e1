"""The demo seeder's analysis runs, computed and written by the analyses' own kinds and writer (issue 42
item 2, "one code path"): the demo's burst, valve isolation and daily simulation cannot drift apart from
a utility's runs of the same kinds.

``queries.demo`` does not import this module: it is registered with the seeders' hook
(``queries.demo.seeders.register_demo_runner``) from ``AnalysesConfig.ready()``. A demo run has no job
(nothing queued it); it pins the demo's model version, records the engine and the SHA-256 of its canonical
inputs like a submitted run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction

from analyses.execute import write_outcome
from analyses.kinds import kinds
from analyses.kinds.base import Outcome
from queries.models import AnalysisRun
from queries.models.jobs import JobStatus

if TYPE_CHECKING:
    from wntr.network import WaterNetworkModel

    from contexts.models import Project
    from queries.models import NetworkSource

#: A demo run's recorded duration (its real one varies with the machine; the seed is deterministic).
DEMO_RUN_SECONDS = 30


def run_for_demo(
    *,
    project: Project,
    kind: str,
    params: Mapping[str, Any],
    wn: WaterNetworkModel,
    run_id: str,
    title: str,
    created_at: datetime,
    version: NetworkSource | None = None,
    valves: Sequence[tuple[str, str, str]] | None = None,
) -> tuple[AnalysisRun, Outcome]:
    """Validate ``params`` (the project's units) as ``kind`` does for a submission, compute on a copy of
    ``wn`` and store the run, its results and its series in one transaction; the run is ``succeeded``
    with ``created_at`` and the time computing it took; returns it with what was computed. An invalid
    request or EPANET's refusal raises. The run's ``cost`` stays empty: the seed is deterministic, and a
    measured cost is not (a run's ``cost`` is what its job measured)."""
    from queries.runs.cost import engine_version
    from queries.runs.inputs import input_sha256

    spec = kinds()[kind]
    unit_system = project.unit_system
    si = spec.validate(dict(params), wn=wn, unit_system=unit_system, project=project)
    outcome = spec.compute(copy.deepcopy(wn), si, project=project, progress=lambda _f, _m: None,
                           unit_system=unit_system, valves=valves)  # fmt: skip
    engine = engine_version()
    digest = input_sha256(kind=kind, parameters=si, model_sha256=version.sha256 if version else "", engine=engine)
    with transaction.atomic():
        run = AnalysisRun.objects.create(
            project=project, run_id=run_id, kind=kind, status=JobStatus.SUCCEEDED, title=title,
            parameters=dict(params), created_at=created_at, started_at=created_at + timedelta(seconds=1),
            finished_at=created_at + timedelta(seconds=DEMO_RUN_SECONDS), summary=outcome.summary,
            model_version=version, engine=engine, input_sha256=digest, progress=1.0, status_message="Done.",
        )  # fmt: skip
        write_outcome(run, outcome, wn, si)
    return run, outcome
