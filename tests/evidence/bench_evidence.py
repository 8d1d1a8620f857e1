"""Measure what saving evidence adds to a call, and a max-size evidence page (issue 12's closing note).

Not a test (not collected). Against a database with the demo loaded, e.g. the test database:

    DJANGO_SETTINGS_MODULE=tests.settings DATABASE_URL=postgis://postgres@127.0.0.1:5432/test_tjwater_evid \\
        .venv/bin/python tests/evidence/bench_evidence.py [calls]

A/B, alternating: the query alone (``get_element_properties`` in a read-only transaction) vs the same
query through the evidence path (``run_with_evidence`` from synchronous code, ``run_evidence_call``) with
a fresh request key (claim, query, save); then the async entry point vs the query alone in a worker
thread. Then a page of about 8 MiB through ``get_task_evidence`` and a whole ~8 MiB read through ``mcp_app.resources``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from datetime import timedelta

import django

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

import anyio  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from contexts.grants import tool_catalog  # noqa: E402
from contexts.models import ExecutionRequest, Principal, Project, Task, TaskRun  # noqa: E402
from contexts.selectors import resolve_context  # noqa: E402
from contexts.services import context_create  # noqa: E402
from contexts.tokens import VerifiedToken  # noqa: E402
from evidence.services import REQUEST_KEY_META, run_with_evidence  # noqa: E402
from evidence.task_tools import get_task_evidence  # noqa: E402
from mcp_app.resources import read_evidence_resource  # noqa: E402
from queries.plan import run_sync  # noqa: E402
from queries.registry import tools_by_name  # noqa: E402
from tests.evidence.factories import run_evidence_call  # noqa: E402

ARGS = {"context_handle": "h" * 43, "element_type": "junction", "element_id": "JUNCTION-0"}


def main(calls: int) -> None:
    project = Project.objects.get(slug="tianjin-demo")
    task = Task.objects.create(project=project, title="bench evidence")
    try:
        run = TaskRun.objects.create(
            task=task,
            sequence=1,
            owner=Principal.objects.get(subject="svc-worker", memberships__project=task.project),
            lease_holder="bench-s",
            lease_expires_at=timezone.now() + timedelta(hours=1),
        )
        ExecutionRequest.objects.create(run=run, request_id=f"bench-{uuid.uuid4().hex[:8]}")
        token = VerifiedToken(
            issuer=settings.TJWATER_OIDC_ISSUER,
            subject="svc-worker",
            client_id="tjwater-agent-mcp",
            scopes=frozenset({"mcp.query"}),
            audience=("tjwater-mcp",),
            expires_at=int(time.time()) + 3600,
        )
        catalog, scoped = tool_catalog()
        with override_settings(TJWATER_CONTEXT_TTL_S=3600):
            created = context_create(
                token=token, project_slug=project.slug, session_id="bench-s", purpose="task_execution",
                catalog=catalog, task_scoped=scoped, task_id=task.pk, run_id=run.pk,
                execution_request_id=ExecutionRequest.objects.get(run=run).request_id,
            )  # fmt: skip
        scope = resolve_context(handle=created.handle, token=token, tool_name=None, required_permissions=())
        spec = tools_by_name()["get_element_properties"]

        def execute() -> dict:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION READ ONLY")
                return run_sync(spec.invoke(scope, ARGS)).model_dump(mode="json")

        def with_evidence(key: str) -> dict:
            return run_evidence_call(
                scope=scope, tool=spec, arguments=ARGS, meta={REQUEST_KEY_META: key}, execute=execute
            )

        plain: list[float] = []
        saved: list[float] = []
        for i in range(calls + 20):
            t0 = time.perf_counter()
            execute()
            t1 = time.perf_counter()
            with_evidence(f"b-{i}")
            t2 = time.perf_counter()
            if i >= 20:  # warm-up
                plain.append(t1 - t0)
                saved.append(t2 - t1)
        ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
        print(f"evidence ({calls} calls from sync code): query {ms(plain):.2f} ms, with evidence {ms(saved):.2f} ms, "
              f"added {ms(saved) - ms(plain):.2f} ms median")  # fmt: skip

        # Load-independent view: this process's CPU time per call (every thread's: process_time).
        cpu_plain: list[float] = []
        cpu_saved: list[float] = []
        for i in range(calls):
            c0 = time.process_time()
            execute()
            c1 = time.process_time()
            with_evidence(f"c-{i}")
            c2 = time.process_time()
            cpu_plain.append(c1 - c0)
            cpu_saved.append(c2 - c1)
        print(f"evidence CPU of this process: query {ms(cpu_plain):.2f} ms, with evidence {ms(cpu_saved):.2f} ms, "
              f"added {ms(cpu_saved) - ms(cpu_plain):.2f} ms median")  # fmt: skip

        async def bench_async() -> tuple[list[float], list[float]]:
            def in_thread() -> dict:
                try:
                    return execute()
                finally:
                    connection.close()

            async def execute_async() -> dict:
                return await anyio.to_thread.run_sync(in_thread)

            a: list[float] = []
            b: list[float] = []
            for i in range(calls + 20):
                t0 = time.perf_counter()
                await execute_async()
                t1 = time.perf_counter()
                await run_with_evidence(
                    scope=scope, tool=spec, arguments=ARGS, meta={REQUEST_KEY_META: f"a-{i}"},
                    execute=execute_async,
                )  # fmt: skip
                t2 = time.perf_counter()
                if i >= 20:
                    a.append(t1 - t0)
                    b.append(t2 - t1)
            return a, b

        a, b = anyio.run(bench_async)
        print(f"async ({calls} calls): query {ms(a):.2f} ms, with evidence {ms(b):.2f} ms, "
              f"added {ms(b) - ms(a):.2f} ms median")  # fmt: skip

        # A document whose data.items page of 500 elements is just under the 8 MiB ceiling.
        element = "水" * 5500  # 16.5 KB of UTF-8 each; 500 of them ≈ 8.0 MiB
        doc = {"source": "model_network", "origin": "model_network", "data": {"items": [element] * 520}}
        t0 = time.perf_counter()
        big = run_evidence_call(
            scope=scope, tool=spec, arguments=ARGS, meta={REQUEST_KEY_META: "big"}, execute=lambda: doc
        )
        t1 = time.perf_counter()
        print(f"saving a {len(element) * 3 * 520 / 2**20:.1f} MiB snapshot: {(t1 - t0) * 1000:.0f} ms")
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            page = get_task_evidence(
                scope=scope, evidence_id=big["evidence_id"], data_path=["data", "items"], limit=500
            ).data
            times.append(time.perf_counter() - t0)
        print(f"max-size page: {page.page_bytes} bytes ({page.page_bytes / 2**20:.2f} MiB, ceiling 8 MiB), "
              f"{len(page.items)} items, median {ms(times):.0f} ms (get_task_evidence, sync)")  # fmt: skip
        small = {"source": "model_network", "origin": "model_network", "data": {"items": [element] * 500}}
        whole = run_evidence_call(
            scope=scope,
            tool=spec,
            arguments=ARGS,
            meta={REQUEST_KEY_META: "whole"},
            execute=lambda: small,
        )
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            read = anyio.run(read_evidence_resource, scope, whole["evidence_uri"])
            times.append(time.perf_counter() - t0)
        size = len(read.contents[0].text.encode())
        print(f"whole read (resources/read, digest verified): {size} bytes ({size / 2**20:.2f} MiB), "
              f"median {ms(times):.0f} ms")  # fmt: skip
    finally:
        Task.objects.filter(pk=task.pk).delete()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
