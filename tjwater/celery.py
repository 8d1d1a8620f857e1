"""The Celery application (entry point ``tjwater.celery:app``).

Configuration comes from Django settings under the ``CELERY_`` namespace; the beat schedule is defined
in code there (SPEC §9). Tasks are discovered in each installed app's ``tasks`` module.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tjwater.settings")

app = Celery("tjwater")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="tjwater.heartbeat")
def heartbeat() -> str:
    """A no-op the beat schedule sends so a stalled worker or beat shows up in the logs and tests."""
    return "ok"
