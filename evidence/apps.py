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
