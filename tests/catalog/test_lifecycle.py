"""A run's life through ``catalog.lifecycle``: each source, its audit event, no-ops, inference and taking it back.

Runs and checkpoints come from inventories pushed through the real upload endpoint and ingest (``push``), so
"a new checkpoint" is what the ingest creates, not a row a test wrote.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog.choices import RunStatus, RunStatusSource
from catalog.lifecycle import run_status_set, runs_infer_ended
from catalog.models import Checkpoint, CheckpointCopy, Run
from ckptfleet.errors import DomainError, PermissionRefused
from tests.conftest import give_roles
from tests.helpers.ingest import dcp

pytestmark = pytest.mark.django_db


def status_events(run: Run) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="run.status", target_type="run", target_id=run.pk).order_by("pk"))


def age(run: Run, days: int) -> None:
    """As if the run's checkpoints were saved (their newest files written) and first seen ``days`` ago."""
    when = timezone.now() - timedelta(days=days)
    Checkpoint.objects.filter(run=run).update(first_seen_at=when, saved_at=when)  # catalog.ages
    CheckpointCopy.objects.filter(checkpoint__run=run).update(newest_mtime=when)


def sidecar(step: int, files: list[dict], *, run: str = "llama-7b", mtime: float, **fields) -> dict:
    """The ``ckptfleet.json`` of a step, as the agent reports it (its parsed content in ``facts``)."""
    base = f"llm/{run}/step-{step}"
    listed = [{"path": f["path"].rsplit("/", 1)[-1], "size": f["size"]} for f in files if f["path"].startswith(base)]
    return {
        "path": f"{base}/ckptfleet.json",
        "size": 300,
        "mtime": mtime,
        "facts": {"kind": "json", "content": {"schema": "ckptfleet/1", "files": listed, **fields}},
    }


@pytest.fixture
def gpu(make_host):
    return make_host()


@pytest.fixture
def run(gpu, push) -> Run:
    push(gpu, dcp(100))
    return Run.objects.get(name="llama-7b")


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user(username="olga", password="a-long-password-1")
    give_roles(user, "operator")
    return Actor.person(user, EventSource.UI)


def test_a_run_the_ingest_finds_is_active_and_nobody_has_said_so(run):
    assert (run.status, run.status_source, run.status_changed_at) == (RunStatus.ACTIVE, "", None)
    assert status_events(run) == []


def test_an_operator_ends_a_run_with_one_audit_event_holding_before_and_after(run, operator):
    change = run_status_set(
        run=run, status="abandoned", actor=operator, source=RunStatusSource.OPERATOR, reason="  loss diverged "
    )
    assert change.changed and change.before == "active"
    run.refresh_from_db()
    assert (run.status, run.status_source, run.status_reason, run.status_by_label) == (
        "abandoned",
        "operator",
        "loss diverged",
        "olga",
    )
    assert run.status_changed_at is not None
    (event,) = status_events(run)
    assert event.actor_label == "olga" and event.source == "ui" and event.reason == "loss diverged"
    assert event.before["status"] == "active" and event.after == {
        "status": "abandoned",
        "source": "operator",
        "reason": "loss diverged",
    }


def test_saying_the_same_status_again_writes_nothing(run, operator):
    run_status_set(run=run, status="finished", actor=operator, source=RunStatusSource.OPERATOR)
    run.refresh_from_db()
    when = run.status_changed_at
    change = run_status_set(run=run, status="finished", actor=operator, source=RunStatusSource.API, reason="again")
    assert not change.changed
    run.refresh_from_db()
    assert (run.status_source, run.status_changed_at, run.status_reason) == ("operator", when, "")
    assert len(status_events(run)) == 1


def test_a_bad_status_or_reason_is_refused_and_changes_nothing(run, operator):
    with pytest.raises(DomainError, match="status must be one of active, finished, failed, abandoned, deleted"):
        run_status_set(run=run, status="done", actor=operator, source=RunStatusSource.OPERATOR)
    with pytest.raises(DomainError, match="longer than 500"):
        run_status_set(run=run, status="failed", actor=operator, source=RunStatusSource.OPERATOR, reason="x" * 501)
    run.refresh_from_db()
    assert run.status == "active" and run.status_source == "" and status_events(run) == []


def test_a_viewer_may_not_set_a_status(run, django_user_model):
    user = django_user_model.objects.create_user(username="vic", password="a-long-password-1")
    give_roles(user, "viewer")
    with pytest.raises(PermissionRefused, match="needs the operator role"):
        run_status_set(run=run, status="failed", actor=Actor.person(user, EventSource.UI), source="operator")
    run.refresh_from_db()
    assert run.status == "active" and status_events(run) == []


def test_a_host_may_speak_only_for_runs_it_stores(run, make_host):
    other = make_host("gpu-b02", "/mnt/nvme1/checkpoints")
    with pytest.raises(PermissionRefused, match="gpu-b02 holds no copy"):
        run_status_set(run=run, status="failed", actor=Actor.agent("gpu-b02"), source="api")
    assert other.host.name == "gpu-b02" and status_events(run) == []
    change = run_status_set(run=run, status="failed", actor=Actor.agent("gpu-a01"), source="api", reason="OOM")
    assert change.changed and change.run.status_by_label == "gpu-a01"


def test_an_idle_run_is_inferred_finished_and_a_new_checkpoint_takes_it_back(run, gpu, push, settings):
    settings.RUN_IDLE_DAYS = 14
    age(run, 13)
    assert runs_infer_ended() == []
    age(run, 15)
    assert runs_infer_ended() == [run.pk]
    assert runs_infer_ended() == []  # idempotent
    run.refresh_from_db()
    assert (run.status, run.status_source) == ("finished", "inferred")
    assert run.status_reason.startswith("no new checkpoint for 14 days")

    push(gpu, dcp(100) + dcp(200))  # the job was only paused: step 200 appears
    run.refresh_from_db()
    assert (run.status, run.status_source) == ("active", "inferred")
    events = status_events(run)
    assert [(e.before["status"], e.after["status"]) for e in events] == [("active", "finished"), ("finished", "active")]
    assert events[1].actor_label == "gpu-a01" and "new checkpoint" in events[1].reason


def test_inference_never_overrides_what_someone_said(run, gpu, push, operator):
    run_status_set(run=run, status="abandoned", actor=operator, source=RunStatusSource.OPERATOR)
    push(gpu, dcp(100) + dcp(200))  # a late checkpoint of an abandoned run does not revive it
    run.refresh_from_db()
    assert run.status == "abandoned"
    age(run, 40)
    assert runs_infer_ended() == []
    assert len(status_events(run)) == 1


def test_a_person_who_says_active_is_believed_for_the_idle_days(run, operator, settings):
    settings.RUN_IDLE_DAYS = 14
    age(run, 30)
    runs_infer_ended()
    run_status_set(run=run, status="active", actor=operator, source=RunStatusSource.OPERATOR, reason="paused")
    assert runs_infer_ended() == []
    Run.objects.filter(pk=run.pk).update(status_changed_at=timezone.now() - timedelta(days=15))
    assert runs_infer_ended() == [run.pk]


def test_confirming_an_inferred_end_makes_it_explicit(run, gpu, push, operator):
    age(run, 30)
    runs_infer_ended()
    change = run_status_set(run=run, status="finished", actor=operator, source=RunStatusSource.OPERATOR)
    assert change.changed and change.run.status_source == "operator"
    push(gpu, dcp(100) + dcp(200))
    run.refresh_from_db()
    assert run.status == "finished"  # no longer only inferred: a new checkpoint does not revive it


def test_the_sidecar_of_the_newest_step_sets_the_status(gpu, push):
    now = timezone.now().timestamp()
    files = dcp(100) + dcp(200)
    files += [
        sidecar(100, files, mtime=now - 60, status="active"),
        sidecar(200, files, mtime=now, status="finished", status_reason="reached 200 steps"),
    ]
    push(gpu, files)
    run = Run.objects.get(name="llama-7b")
    assert (run.status, run.status_source, run.status_reason) == ("finished", "sidecar", "reached 200 steps")
    (event,) = status_events(run)
    assert event.actor_label == "gpu-a01" and event.source == "agent" and event.after["source"] == "sidecar"
    copy = CheckpointCopy.objects.get(checkpoint__step=200)
    assert copy.state == "complete", copy.reasons


def test_a_bad_sidecar_status_is_refused_with_a_reason_and_changes_nothing(gpu, push):
    files = dcp(100)
    files.append(sidecar(100, files, mtime=timezone.now().timestamp(), status="done"))
    push(gpu, files)
    run = Run.objects.get(name="llama-7b")
    assert run.status == "active" and status_events(run) == []
    copy = CheckpointCopy.objects.get(checkpoint__step=100)
    assert copy.state == "complete"
    assert any("status 'done' refused" in r for r in copy.reasons), copy.reasons


def test_an_operator_who_speaks_after_the_sidecar_is_not_undone_by_reading_it_again(gpu, push, operator):
    files = dcp(100)
    files.append(sidecar(100, files, mtime=timezone.now().timestamp() - 5, status="finished"))
    push(gpu, files)
    run = Run.objects.get(name="llama-7b")
    run_status_set(run=run, status="active", actor=operator, source=RunStatusSource.OPERATOR, reason="resumed")
    files = [dict(f, mtime=f["mtime"] + 1) if f["path"].endswith("__0_0.distcp") else f for f in files]
    push(gpu, files)  # a changed file: the directory, and its old sidecar, are judged again
    run.refresh_from_db()
    assert (run.status, run.status_source) == ("active", "operator")
    assert len(status_events(run)) == 2


def test_the_command_sets_shows_and_infers(run, django_user_model):
    out = io.StringIO()
    call_command("fleet_run", "status", "llm/llama-7b", "failed", "--reason", "NCCL timeout", stdout=out)
    assert "llm/llama-7b: active -> failed" in out.getvalue()
    run.refresh_from_db()
    assert (run.status, run.status_source, run.status_by_label) == ("failed", "operator", "manage.py fleet_run")
    assert status_events(run)[0].source == "command"
    out = io.StringIO()
    call_command("fleet_run", "show", str(run.pk), stdout=out)
    assert "Failed · operator by manage.py fleet_run" in out.getvalue() and "NCCL timeout" in out.getvalue()
    with pytest.raises(CommandError, match="does not exist"):
        call_command("fleet_run", "status", "llm/nope", "failed")
    viewer = django_user_model.objects.create_user(username="vera", password="a-long-password-1")
    give_roles(viewer, "viewer")
    with pytest.raises(CommandError, match="needs the operator role"):
        call_command("fleet_run", "status", "llm/llama-7b", "active", "--as", "vera")
    out = io.StringIO()
    call_command("fleet_run", "infer", stdout=out)
    assert "0 run(s)" in out.getvalue()


def test_beat_infers_ended_runs_daily(run):
    from ckptfleet.celery import app

    entry = app.conf.beat_schedule["infer-ended-runs"]
    assert entry["task"] == "catalog.tasks.infer_ended_runs"
    age(run, 100)
    from catalog.tasks import infer_ended_runs

    assert infer_ended_runs.delay().get() == {"ended": 1, "runs": [run.pk]}
