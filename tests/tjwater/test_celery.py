"""A real task through the real Redis broker to a real worker thread."""

from __future__ import annotations

from celery.contrib.testing.worker import start_worker

from tjwater.celery import app, heartbeat


def test_heartbeat_round_trip_through_redis_worker(test_redis: object) -> None:
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        result = heartbeat.delay()
        assert result.get(timeout=20) == "ok"


def test_celery_uses_json_only_and_late_acks() -> None:
    assert app.conf.task_serializer == "json"
    assert app.conf.accept_content == ["json"]
    assert app.conf.task_acks_late is True
    assert app.conf.broker_url.startswith("redis://")
    assert "health-heartbeat" in app.conf.beat_schedule
