from django.apps import AppConfig

#: This app's tool families (``queries/tools/<family>.py``, each a ``TOOLS`` list of ``ToolSpec``).
FAMILIES = (
    "network",
    "scada",
    "baseline",
    "spatial",
    "topology",
    "ranking",
    "gis",
    "runtime",
    "peripheral",
    "analysis",
    "placement",
    "history",
)


class QueriesConfig(AppConfig):
    name = "queries"

    def ready(self) -> None:
        # Each family registers itself into the project's tool registry (tjwater.registry); the catalog,
        # binding, REST and the parity tests all read the registry.
        from importlib import import_module

        from queries import checks  # noqa: F401  (registers the system checks)
        from tjwater.registry import TOOLS

        for family in FAMILIES:
            TOOLS.register(app=self.name, family=family, tools=import_module(f"queries.tools.{family}").TOOLS)
        # The pg_sleep tool that proves cancellation: served only with TJWATER_MCP_TEST_TOOLS on.
        from queries.tools import testing

        TOOLS.register(app=self.name, family="testing", tools=testing.TOOLS, test_only=True)
        _register_job_kinds()


def _register_job_kinds() -> None:
    """This app's job kinds (``queries.jobrunner``): the baseline and the SCADA imports run on the runner
    (the imports in their command's process, ``run_now``); the network and GIS imports run in their
    commands and are recorded as jobs of their kind."""
    from queries.jobrunner.registry import JobKindSpec, register
    from queries.models.jobs import JobKind

    register(
        JobKindSpec(
            name=JobKind.BASELINE.value,
            label=JobKind.BASELINE.label,
            run="queries.services.baseline_jobs.run_baseline_job",
            soft_limit_s=4 * 3600,
            hard_limit_s=4 * 3600 + 300,
        )
    )
    for kind, run in (
        (JobKind.SCADA_DEVICES, "queries.services.scada_jobs.run_scada_devices_job"),
        (JobKind.SCADA_IMPORT, "queries.services.scada_jobs.run_scada_import_job"),
    ):
        register(JobKindSpec(name=kind.value, label=str(kind.label), run=run))
    for kind in (JobKind.NETWORK_IMPORT, JobKind.GIS_IMPORT):
        register(JobKindSpec(name=kind.value, label=str(kind.label)))
