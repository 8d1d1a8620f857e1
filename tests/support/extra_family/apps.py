"""A Django app of the test settings that adds one tool family the way any app does (issue 18 §1): its
``ready()`` registers ``TOOLS`` into ``tjwater.registry.TOOLS`` — no other file names it. The registry tests
then find its tool in ``tools/list``, on REST, in the catalog check and in both parity tests."""

from django.apps import AppConfig


class ExtraFamilyConfig(AppConfig):
    name = "tests.support.extra_family"
    label = "extra_family"

    def ready(self) -> None:
        from tests.support.extra_family.tools import TOOLS as EXTRA_TOOLS
        from tjwater.registry import TOOLS

        TOOLS.register(app=self.label, family="extra", tools=EXTRA_TOOLS, test_only=True)
