"""What the analyses app adds to the project's registries, from ``AnalysesConfig.ready()``: one job kind
per analysis kind (run by ``analyses.execute``, on the ``analysis`` queue), the analysis tools, the
payload models of their results and the demo seeder's runner of its analysis runs. Light by design: nothing
here imports the engine."""

from __future__ import annotations

from analyses.kinds import KIND_NAMES, LABELS
from queries.jobrunner.registry import JobKindSpec, register

#: The Celery queue of analysis runs (``make run`` starts a worker for it; the README says how elsewhere).
QUEUE = "analysis"


def register_job_kinds() -> None:
    from django.conf import settings

    memory_mb = int(getattr(settings, "TJWATER_ANALYSIS_MEMORY_LIMIT_MB", 2048)) or None
    for name in KIND_NAMES:
        register(
            JobKindSpec(
                name=name,
                label=LABELS[name],
                run="analyses.execute.run_analysis_job",
                queue=QUEUE,
                soft_limit_s=570,
                hard_limit_s=600,
                on_state="analyses.execute.mirror_state",
                memory_limit_mb=memory_mb,
            )
        )


def register_demo_runner() -> None:
    from queries.demo.seeders import register_demo_runner as register

    register("analyses.demo.run_for_demo")


def register_result_payloads() -> None:
    from queries.schemas.result_payloads import register_result_payloads as register

    register("analyses.kinds.result_models")


def register_tools() -> None:
    from analyses.tools import register

    register()
