"""One Lua script on the deployment's Redis, loaded lazily per process (``contexts.slots`` and
``contexts.bind_rate`` share it): a synchronous redis-py client made on first use, the script registered
on it (``EVALSHA``, reloaded by redis-py on ``NOSCRIPT``), and a ``reset`` for tests that change
``REDIS_URL``."""

from __future__ import annotations

import threading
from typing import Any

import redis
from django.conf import settings
from redis.commands.core import Script


class LazyScript:
    def __init__(self, source: str, *, timeout_s: float) -> None:
        self.source = source
        self.timeout_s = timeout_s
        self._client: redis.Redis | None = None
        self._script: Script | None = None
        self._lock = threading.Lock()

    def get(self) -> tuple[redis.Redis, Script]:
        with self._lock:
            if self._client is None or self._script is None:
                self._client = redis.Redis.from_url(
                    settings.REDIS_URL, socket_connect_timeout=self.timeout_s, socket_timeout=self.timeout_s
                )
                self._script = self._client.register_script(self.source)
            return self._client, self._script

    def __call__(self, *, keys: list[str], args: list[Any]) -> Any:
        _, script = self.get()
        return script(keys=keys, args=args)

    def reset(self) -> None:
        with self._lock:
            self._client, self._script = None, None
