"""The analyses app: execution of the hydraulic analyses as jobs (issue 42). Nothing imports it: its job
kinds are found through the job runner's registry and its tools through the tool registry, both filled
here from ``ready()`` with no engine imported (a process loads WNTR on its first submit, not at start)."""

from __future__ import annotations

from django.apps import AppConfig


class AnalysesConfig(AppConfig):
    name = "analyses"
    verbose_name = "Analyses"

    def ready(self) -> None:
        from analyses.registration import (
            register_demo_runner,
            register_job_kinds,
            register_result_payloads,
            register_tools,
        )

        register_job_kinds()
        register_tools()
        register_result_payloads()
        register_demo_runner()
