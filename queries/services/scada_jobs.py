"""The SCADA imports as jobs of the job runner (``queries.jobrunner``): ``scada_import`` (readings,
``queries.importer.scada_readings``) and ``scada_devices`` (devices, ``queries.importer.scada_devices``).

Their commands record a queued job whose ``detail`` holds the inputs (the file as given, the options) and
run it in their own process (``run_now``); the run functions here call the importers with the arguments
the commands gave them. The import's writes and the job's success are one transaction, so a job never
shows succeeded without its rows, nor its rows without success. A refused file ends the job ``failed`` with
what the import counted (rows, rejects, the first rejected lines) and nothing written; the error itself
is handed over (``JobContext.hand_over``) for the command to print in full. A cancel (the cancel key)
stops a readings import at its next batch, and either import just before its commit: nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from contexts.models import Project
from queries.jobrunner.runner import JobContext, JobFailed
from queries.models.jobs import Job, JobStatus
from queries.services.jobs import job_started

#: A file the import refused as a whole (not found, unreadable, a bad option, a bad row or header).
INVALID_INPUT = "INVALID_INPUT"
#: A readings file with more rejected samples than ``--max-rejects`` allows.
TOO_MANY_REJECTS = "TOO_MANY_REJECTS"
#: Rejected lines a job keeps (all are counted).
KEPT_REJECT_LINES = 20


def scada_job(*, project: Project, kind: str, path: Path, dry_run: bool = False, **options: object) -> Job:
    """Record a queued SCADA import of ``path`` (started by ``manage.py``) with its inputs in ``detail``,
    for ``run_now``."""
    with transaction.atomic():
        job = job_started(
            project=project, kind=kind, subject=path.name, started_by="manage.py", queued=True, dry_run=dry_run
        )
        job.detail = {"path": str(path), **options}
        job.save(update_fields=["detail"])
    return job


def run_scada_import_job(ctx: JobContext) -> None:
    """The ``scada_import`` kind: the readings of the job's file, its progress as samples read and
    rejected (``counts`` for an in-process listener), cancellable between batches and before the commit.
    The reports made inside the import's transaction reach the row when it commits; the listener hears
    them at once."""
    from queries.importer.scada_devices import ScadaImportError
    from queries.importer.scada_readings import RejectedFile, import_scada

    job = ctx.job
    path = Path(job.detail["path"])
    reading = f"Reading {path.name}."

    def progress(samples: int, rejects: int) -> None:
        ctx.stop_if_asked()  # inside the import's transaction: a cancel rolls it back
        ctx.progress(0.0, reading, samples=samples, rejects=rejects)

    ctx.progress(0.0, reading)  # outside the transaction: the row shows it while the import runs
    try:
        with transaction.atomic():
            summary = import_scada(
                project=Project.objects.get(pk=job.project_id),
                path=path,
                timezone=job.detail.get("timezone"),
                fmt=job.detail.get("format"),
                dry_run=job.dry_run,
                max_rejects=int(job.detail.get("max_rejects", 0)),
                progress=progress,
            )
            ctx.stop_if_asked()
            _keep_rejects(job, summary.rejects, summary.reject_lines)
            ctx.succeed(rows=summary.slots, detail=summary.as_dict())
    except RejectedFile as exc:
        ctx.hand_over(exc)
        raise JobFailed(
            TOO_MANY_REJECTS, str(exc).splitlines()[0],
            rows=exc.summary.samples, rejects=exc.summary.rejects, reject_lines=exc.summary.reject_lines,
        ) from exc  # fmt: skip
    except ScadaImportError as exc:
        ctx.hand_over(exc)
        raise JobFailed(INVALID_INPUT, str(exc).splitlines()[0]) from exc
    ctx.hand_over(summary)


def run_scada_devices_job(ctx: JobContext) -> None:
    """The ``scada_devices`` kind: the devices of the job's CSV file, all or nothing; cancellable before
    the commit."""
    from queries.importer.scada_devices import ScadaImportError, import_scada_devices

    job = ctx.job
    path = Path(job.detail["path"])
    ctx.progress(0.0, f"Reading {path.name}.")
    try:
        with transaction.atomic():
            summary = import_scada_devices(
                project=Project.objects.get(pk=job.project_id), path=path, crs=job.detail.get("crs", "EPSG:4326")
            )
            ctx.stop_if_asked()
            ctx.succeed(rows=summary.created + summary.updated, detail=dict(summary.__dict__))
    except ScadaImportError as exc:
        ctx.hand_over(exc)
        lines = str(exc).splitlines()  # the first line says why, one line per problem after it
        raise JobFailed(INVALID_INPUT, lines[0], rejects=max(0, len(lines) - 1), reject_lines=lines[1:]) from exc
    ctx.hand_over(summary)


def _keep_rejects(job: Job, rejects: int, reject_lines: list[str]) -> None:
    """The import's rejects, on its running job, in the transaction that ends it (``succeed`` writes
    rows and detail only)."""
    Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        rejects=rejects, reject_lines=reject_lines[:KEPT_REJECT_LINES]
    )
