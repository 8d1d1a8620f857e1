from django.apps import AppConfig


class ContextsConfig(AppConfig):
    name = "contexts"

    def ready(self) -> None:
        from contexts import checks  # noqa: F401  (registers the system checks)
