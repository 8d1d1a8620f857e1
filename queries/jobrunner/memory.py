"""A job's memory limit: while its function runs, the worker process may grow its address space by at
most the kind's allowance (``RLIMIT_AS``, lowered for the run and put back after it). Past it an
allocation fails — ``MemoryError`` in Python, EPANET's "insufficient memory" (error 101) in the toolkit —
and the job ends ``MEMORY_LIMIT`` with nothing written, instead of the kernel's OOM killer taking the whole
worker and every other job in it (Celery's ``--max-memory-per-child`` only replaces a child *after* a
task). Linux only (``/proc/self/statm``); elsewhere no limit is set.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MIB = 1 << 20


def address_space_bytes() -> int | None:
    """This process's address space now (bytes), or None where ``/proc`` does not say."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def memory_allowance(allowance_mb: int | None) -> Iterator[None]:
    """Let the body grow the address space by at most ``allowance_mb`` MiB (None: no limit)."""
    now = address_space_bytes() if allowance_mb else None
    if now is None or allowance_mb is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + allowance_mb * MIB
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
