from django.apps import AppConfig


class EvidenceConfig(AppConfig):
    name = "evidence"

    def ready(self) -> None:
        # The demo seed (a lower layer) runs what higher apps register (STYLE: no upward import).
        from evidence.demo import seed_demo_sample
        from queries.demo.seed import register_demo_seeder

        register_demo_seeder(seed_demo_sample)
