from django.apps import AppConfig


class QueriesConfig(AppConfig):
    name = "queries"

    def ready(self) -> None:
        from queries import checks  # noqa: F401  (registers the system checks)
