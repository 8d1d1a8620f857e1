from django.apps import AppConfig


class EvidenceConfig(AppConfig):
    name = "evidence"

    def ready(self) -> None:
        # A project holding evidence snapshots is deleted only when the operator includes them (issue 20).
        from contexts.onboarding import register_delete_guard
        from evidence.models import EvidenceSnapshot

        register_delete_guard(
            "evidence snapshots", lambda project_id: EvidenceSnapshot.objects.filter(project_id=project_id).count()
        )
        # The demo seed (a lower layer) runs what higher apps register (STYLE: no upward import).
        from evidence.demo import seed_demo_sample
        from queries.demo.seeders import register_demo_seeder

        register_demo_seeder(seed_demo_sample)
        # The task tools (get_task_context, get_task_evidence) into the project's tool registry.
        from evidence.tools import TOOLS as TASK_TOOLS
        from tjwater.registry import TOOLS

        TOOLS.register(app=self.name, family="task", tools=TASK_TOOLS)
