"""The SCADA imports run on the job runner (issue 42): ``import_scada`` and ``import_scada_devices`` record a
queued job of their kind and run it in their process (``run_now``) through the kind's run function
(``queries.services.scada_jobs``), with the Job row and the command's output as before; a refused file
ends the job failed with what the import counted and writes nothing; an in-process listener hears every
progress report (the terminal's progress bar); a cancel stops a readings import at its next batch.
Real PostgreSQL and Redis, files written here."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from contexts.models import Project
from queries.importer.epanet import import_network, wntr_network_path
from queries.importer.scada_readings import ReadingImportSummary
from queries.jobrunner.registry import JobKindSpec, kind_spec, register
from queries.jobrunner.runner import JobContext, ProgressListener, request_cancel, run_now
from queries.models import ScadaDevice, ScadaReading
from queries.models.jobs import Job, JobKind
from queries.services.scada_jobs import scada_job

pytestmark = pytest.mark.django_db
HERE = "tests.queries.jobrunner.test_scada_jobs"
DEVICES = (
    "device_id,name,quantity,unit,element_type,element_id,x,y,sample_interval_s\n"
    "PT-1,Pressure 10,pressure,psi,junction,10,,,300\n"
    "PT-2,Pressure 11,pressure,psi,junction,11,,,300\n"
)
START = datetime(2026, 1, 1, tzinfo=UTC)
ROWS_SEEN: list[str] = []


def wide(path: Path, lines: int, *, bad: int = 0) -> Path:
    """A wide readings file of ``lines`` 5-minute times for PT-1 and PT-2; the first ``bad`` carry a
    value that is not a number (one reject each)."""
    body = "".join(
        f"{(START + timedelta(minutes=5 * i)).isoformat()},{'x' if i < bad else 60 + i % 3},61\n" for i in range(lines)
    )
    path.write_text("time,PT-1,PT-2\n" + body)
    return path


def readings(project: Project) -> list[tuple[str, datetime, float | None]]:
    return list(
        ScadaReading.objects.filter(device__project=project)
        .order_by("device__device_id", "time")
        .values_list("device__device_id", "time", "monitored_value")
    )


@pytest.fixture
def net1(project: Project, tmp_path: Path) -> Project:
    import_network(project=project, inp_path=wntr_network_path("Net1.inp"), scale=30.0, baseline_hours=0)
    (tmp_path / "devices.csv").write_text(DEVICES)
    call_command("import_scada_devices", str(tmp_path / "devices.csv"), "--project", project.slug, stdout=StringIO())
    return project


def test_both_kinds_run_by_their_run_function() -> None:
    assert kind_spec(JobKind.SCADA_IMPORT.value).run == "queries.services.scada_jobs.run_scada_import_job"
    assert kind_spec(JobKind.SCADA_DEVICES.value).run == "queries.services.scada_jobs.run_scada_devices_job"


def test_the_devices_command_runs_its_job_to_success(net1: Project) -> None:
    job = Job.objects.get(project=net1, kind="scada_devices")
    assert (job.status, job.subject, job.started_by, job.rows, job.rejects, job.reject_lines, job.dry_run) == (
        "succeeded", "devices.csv", "manage.py", 2, 0, [], False,
    )  # fmt: skip
    assert job.detail == {"created": 2, "updated": 0, "unchanged": 0, "device_ids": ["PT-1", "PT-2"]}
    assert (job.progress, job.error_code, job.message, job.status_message) == (1.0, "", "", "Done.")
    assert job.started_at is not None and job.finished_at is not None and job.started_at <= job.finished_at


def test_a_refused_devices_file_fails_with_its_problems_and_writes_nothing(net1: Project, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(DEVICES + "".join(f"X-{i},Odd,vibration,mm/s,junction,10,,,300\n" for i in range(23)))
    before = list(ScadaDevice.objects.filter(project=net1).order_by("pk").values_list("pk", "device_id", "name"))
    with pytest.raises(CommandError) as caught:
        call_command("import_scada_devices", str(bad), "--project", net1.slug)
    lines = str(caught.value).splitlines()
    assert lines[0] == "bad.csv refused, nothing written (23 problem(s)):"
    assert len(lines) == 22 and lines[-1] == "… and 3 more"  # the command still prints every line it got
    job = Job.objects.get(project=net1, kind="scada_devices", subject="bad.csv")
    assert (job.status, job.error_code, job.message, job.rows) == ("failed", "INVALID_INPUT", lines[0], None)
    assert (job.rejects, job.reject_lines) == (21, lines[1:21])
    assert (
        list(ScadaDevice.objects.filter(project=net1).order_by("pk").values_list("pk", "device_id", "name")) == before
    )


def test_the_readings_job_is_heard_while_it_runs_and_ends_as_the_command_ended_it(
    net1: Project, tmp_path: Path
) -> None:
    path = wide(tmp_path / "historian.csv", 12, bad=2)
    job = scada_job(project=net1, kind=JobKind.SCADA_IMPORT, path=path, timezone=None, format=None, max_rejects=2)
    assert (job.status, job.detail) == ("queued", {"path": str(path), "timezone": None, "format": None,
                                                   "max_rejects": 2})  # fmt: skip
    heard: list[tuple[str, float, str, dict[str, int]]] = []
    handed: list[object] = []

    def listen(fraction: float, message: str, /, **counts: int) -> None:
        heard.append((Job.objects.get(pk=job.pk).status, fraction, message, counts))

    job = run_now(job, on_progress=listen, on_result=handed.append)
    reading = ("running", 0.0, "Reading historian.csv.")
    assert heard == [(*reading, {}), (*reading, {"samples": 22, "rejects": 2})]
    (summary,) = handed
    assert isinstance(summary, ReadingImportSummary) and summary.inserted == 22
    assert (job.status, job.rows, job.rejects, job.dry_run, job.progress, job.error_code) == (
        "succeeded", summary.slots, 2, False, 1.0, "",
    )  # fmt: skip
    assert job.reject_lines == summary.reject_lines and len(job.reject_lines) == 2
    assert job.detail == json.loads(json.dumps(summary.as_dict()))  # the inputs gave way to the summary
    assert len(readings(net1)) == 22

    out = StringIO()
    call_command("import_scada", str(path), "--project", net1.slug, "--max-rejects", "2", "--dry-run", "--json",
                 stdout=out)  # fmt: skip
    printed = json.loads(out.getvalue())
    dry = Job.objects.filter(project=net1, kind="scada_import").latest("pk")
    assert (dry.status, dry.dry_run, dry.detail, printed["unchanged"]) == ("succeeded", True, printed, 22)


def test_a_refused_readings_file_fails_with_its_counts_and_writes_nothing(net1: Project, tmp_path: Path) -> None:
    call_command("import_scada", str(wide(tmp_path / "first.csv", 6)), "--project", net1.slug, stdout=StringIO())
    before = readings(net1)
    path = wide(tmp_path / "refused.csv", 30, bad=25)
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("import_scada", str(path), "--project", net1.slug, "--json", stdout=out)
    lines = str(caught.value).splitlines()
    assert lines[0] == (
        "refused.csv refused, nothing written: 25 rejected sample(s), more than --max-rejects 0 "
        "(stopped reading after line 31: the rest was not read):"
    )
    assert len(lines) == 22 and lines[-1] == "… and 5 more"
    printed = json.loads(out.getvalue())
    assert printed["refused"] is True and (printed["samples"], printed["rejects"]) == (35, 25)
    job = Job.objects.get(project=net1, kind="scada_import", subject="refused.csv")
    assert (job.status, job.error_code, job.message) == ("failed", "TOO_MANY_REJECTS", lines[0])
    assert (job.rows, job.rejects, job.reject_lines) == (35, 25, lines[1:21])
    assert readings(net1) == before


def cancel_at(job: Job, heard: list[dict[str, int]], *, counted: bool) -> ProgressListener:
    """A listener that asks the runner's cancel at the first report (``counted``: with figures, i.e.
    after a batch was read) and waits past the cancel key's poll interval."""

    asked = False

    def listen(fraction: float, message: str, /, **counts: int) -> None:
        nonlocal asked
        heard.append(counts)
        if bool(counts) == counted and not asked:
            asked = True
            request_cancel(Job.objects.get(pk=job.pk), actor="alice")
            time.sleep(0.25)

    return listen


def test_a_cancel_stops_the_readings_import_at_its_next_batch_and_writes_nothing(
    net1: Project, tmp_path: Path, test_redis: redis.Redis
) -> None:
    """Two batches (a CSV batch is 4 MiB of lines): a cancel asked while the first is read stops the
    import before the second, inside its transaction."""
    call_command("import_scada", str(wide(tmp_path / "first.csv", 6)), "--project", net1.slug, stdout=StringIO())
    before = readings(net1)
    path = wide(tmp_path / "big.csv", 180_000)
    assert path.stat().st_size > 4 * 1024 * 1024
    job = scada_job(project=net1, kind=JobKind.SCADA_IMPORT, path=path, timezone=None, format=None, max_rejects=0)
    heard: list[dict[str, int]] = []
    job = run_now(job, on_progress=cancel_at(job, heard, counted=True))
    assert len(heard) == 2 and 0 < heard[1]["samples"] < 360_000  # the start, the first batch: no second
    assert (job.status, job.message) == ("cancelled", "Cancelled while it ran; nothing was written.")
    assert readings(net1) == before


def test_a_cancel_after_the_last_batch_rolls_the_merged_readings_back(
    net1: Project, tmp_path: Path, test_redis: redis.Redis
) -> None:
    before = readings(net1)
    job = scada_job(project=net1, kind=JobKind.SCADA_IMPORT, path=wide(tmp_path / "one.csv", 12), timezone=None,
                    format=None, max_rejects=0)  # fmt: skip
    heard: list[dict[str, int]] = []
    job = run_now(job, on_progress=cancel_at(job, heard, counted=True))
    assert heard == [{}, {"samples": 24, "rejects": 0}]  # one batch: merged, then stopped before the commit
    assert (job.status, job.message, job.rows) == ("cancelled", "Cancelled while it ran; nothing was written.", None)
    assert readings(net1) == before == []


def test_a_cancel_stops_the_devices_import_before_its_commit(
    net1: Project, tmp_path: Path, test_redis: redis.Redis
) -> None:
    before = list(ScadaDevice.objects.filter(project=net1).order_by("pk").values_list("pk", "device_id", "name"))
    path = tmp_path / "renamed.csv"
    path.write_text(DEVICES.replace("Pressure 10", "Renamed 10"))
    job = scada_job(project=net1, kind=JobKind.SCADA_DEVICES, path=path, crs="EPSG:4326")
    heard: list[dict[str, int]] = []
    job = run_now(job, on_progress=cancel_at(job, heard, counted=False))
    assert heard == [{}] and (job.status, job.message) == ("cancelled", "Cancelled while it ran; nothing was written.")
    assert (
        list(ScadaDevice.objects.filter(project=net1).order_by("pk").values_list("pk", "device_id", "name")) == before
    )


def kind_reports(ctx: JobContext) -> None:
    """Three reports of one phase within ``PROGRESS_EVERY_S``: the row is written once."""
    for fraction in (0.1, 0.2, 0.3):
        ctx.progress(fraction, "Reading.", samples=int(fraction * 10))
    ROWS_SEEN.append(f"{Job.objects.get(pk=ctx.job.pk).progress}")


register(JobKindSpec(name="test_reports", label="Test reports", run=f"{HERE}.kind_reports"))


def test_the_listener_hears_every_report_unthrottled(project: Project) -> None:
    job = Job.objects.create(project=project, kind="test_reports", subject="t")
    heard: list[tuple[float, str, dict[str, int]]] = []
    ROWS_SEEN.clear()
    job = run_now(job, on_progress=lambda fraction, message, /, **counts: heard.append((fraction, message, counts)))
    assert heard == [(0.1, "Reading.", {"samples": 1}), (0.2, "Reading.", {"samples": 2}),
                     (0.3, "Reading.", {"samples": 3})]  # fmt: skip
    assert ROWS_SEEN == ["0.1"] and job.status == "succeeded"
