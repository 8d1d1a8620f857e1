"""The job kinds: each app registers its kinds from ``AppConfig.ready()``, and the runner, the admin and
the commands find them here by name (``Job.kind`` has no database choices: a kind is validated against
this registry in Python, so a new kind is not a migration).

A kind names what runs it as a dotted path (``run``), imported on first use, so registering a kind costs
nothing in a process that never runs it (the ASGI server imports no engine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queries.jobrunner.runner import JobContext

#: The longest kind name a job can carry (``Job.kind``).
KIND_MAX_LENGTH = 40


@dataclass(frozen=True)
class JobKindSpec:
    """One kind of job: its name (``Job.kind``), its label (admin, commands), the dotted path of the
    function that runs it (``fn(ctx: JobContext) -> None``, or empty for a kind that is only recorded,
    such as a synchronous import), the Celery queue it goes to, its default soft and hard time limits (s)
    and an optional ``on_state`` hook (dotted path, ``fn(job, status) -> None``) called in the same
    transaction as each change of state (an analysis run mirrors its job's status). ``memory_limit_mb``:
    how much the worker's address space may grow while a job runs (``queries.jobrunner.memory``; None:
    unlimited); past it the job ends ``MEMORY_LIMIT``."""

    name: str
    label: str
    run: str = ""
    queue: str = "celery"
    soft_limit_s: int = 3600
    hard_limit_s: int = 3900
    on_state: str = ""
    memory_limit_mb: int | None = None

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > KIND_MAX_LENGTH:
            raise ValueError(f"a job kind's name is 1 to {KIND_MAX_LENGTH} characters: {self.name!r}")
        if self.hard_limit_s < self.soft_limit_s:
            raise ValueError(f"job kind {self.name}: the hard time limit is below the soft one")

    def runner(self) -> Callable[[JobContext], Any]:
        return _resolve(self.run)

    def state_hook(self) -> Callable[..., Any] | None:
        return _resolve(self.on_state) if self.on_state else None


def _resolve(path: str) -> Callable[..., Any]:
    module, _, attr = path.rpartition(".")
    fn: Callable[..., Any] = getattr(import_module(module), attr)
    return fn


_KINDS: dict[str, JobKindSpec] = {}


def register(spec: JobKindSpec) -> None:
    """Register ``spec``; registering the same spec again is a no-op, another spec under its name an error."""
    known = _KINDS.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"job kind {spec.name!r} is already registered differently")
    _KINDS[spec.name] = spec


def kind_spec(name: str) -> JobKindSpec:
    """The registered kind ``name``; ``KeyError`` naming the known kinds otherwise."""
    try:
        return _KINDS[name]
    except KeyError:
        raise KeyError(f"unknown job kind {name!r} (known: {', '.join(sorted(_KINDS))})") from None


def find_spec(name: str) -> JobKindSpec | None:
    return _KINDS.get(name)


def kind_label(name: str) -> str:
    spec = _KINDS.get(name)
    return spec.label if spec is not None else name


def kind_names() -> list[str]:
    return sorted(_KINDS)
