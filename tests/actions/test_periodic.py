"""The periodic work without a broker (``dashboard.periodic``, ``manage.py fleet_beat``) and the demo's short grace.

A deletion goes from scheduled to executed by the periodic work alone, as in the demo: the grace period in minutes
(development only), then ``fleet_beat`` starting it, against moto's S3 server with tasks run in-process.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from actions import services
from actions.models import DeletionState
from audit.models import AuditEvent
from dashboard import periodic
from tests.conftest import give_roles
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def test_the_grace_period_in_minutes_is_what_a_deletion_waits_in_development(s3, scanned, settings):
    settings.DEBUG = True
    settings.DELETION_GRACE_MINUTES = 3
    before = timezone.now()
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    assert before + timedelta(minutes=3) <= job.execute_after <= timezone.now() + timedelta(minutes=3)
    assert services.grace_text() == "3 minutes"
    preview = services.preview(checkpoint=checkpoint(200))
    assert preview.grace_text == "3 minutes"


def test_outside_development_the_minutes_are_ignored_and_the_days_count(settings):
    settings.DEBUG = False
    settings.DELETION_GRACE_MINUTES = 3
    settings.DELETION_GRACE_DAYS = 7
    assert services.grace_period() == timedelta(days=7)
    assert services.grace_text() == "7 days"


@pytest.mark.parametrize(("debug", "ok"), [("1", True), ("0", False)])
def test_the_minutes_setting_refuses_to_start_outside_development(debug, ok, tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}}
    environ.update(
        {
            "CKPTFLEET_VAR_DIR": str(tmp_path),
            "CKPTFLEET_DEBUG": debug,
            "DJANGO_SECRET_KEY": "x" * 50,
            "CKPTFLEET_AUDIT_KEY": "k" * 40,
            "CKPTFLEET_DELETION_GRACE_MINUTES": "3",
        }
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    if ok:
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        assert done.returncode != 0 and "CKPTFLEET_DELETION_GRACE_MINUTES" in done.stderr
        assert "development" in done.stderr


def test_fleet_beat_once_starts_a_deletion_whose_grace_ended_and_is_audited(
    s3, scanned, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded default, as the demo runs (no broker)
    settings.DEBUG = True
    settings.DELETION_GRACE_MINUTES = 3
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("fleet_beat", "--once", stdout=out)
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED  # still within its three minutes
    make_due(job)  # three minutes later
    with django_capture_on_commit_callbacks(execute=True):
        call_command("fleet_beat", "--once", stdout=out)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert (
        "start-due-deletions             done" in out.getvalue().replace("  ", " ")
        or "start-due-deletions" in out.getvalue()
    )
    runs = AuditEvent.objects.filter(action=periodic.RUN_NOW).order_by("pk")
    assert runs.count() == 2
    assert "start-due-deletions" in runs.last().after["tasks"] and runs.last().after["mode"] == "in-process"


def test_the_loop_runs_each_task_once_its_interval_passed(monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(
        periodic,
        "entries",
        lambda: [periodic.Entry("fast", "t.fast", 0.05), periodic.Entry("slow", "t.slow", 3600.0)],
    )
    monkeypatch.setattr(periodic, "run_entry", lambda e: ran.append(e.name) or periodic.Outcome(e, "done"))
    import time

    ends = time.monotonic() + 0.25
    periodic.loop(tick=0.03, stop=lambda: time.monotonic() > ends)
    assert "slow" not in ran  # an hour has not passed
    assert 2 <= ran.count("fast") <= 8  # every 0.05 s for 0.25 s, ticking every 0.03 s


def test_a_failing_task_is_reported_and_the_others_still_run(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # in-process: each outcome is known at once
    monkeypatch.setattr(
        periodic,
        "entries",
        lambda: [
            periodic.Entry("boom", "actions.tasks.start_due_deletions", 60.0),
            periodic.Entry("fine", "actions.tasks.record_lease_lapses", 60.0),
        ],
    )
    from actions import execution

    def explode():
        raise RuntimeError("the store is down")

    monkeypatch.setattr(execution, "start_due", explode)
    outcomes = periodic.run_now(actor=OPERATOR)
    assert [(o.entry.name, o.state) for o in outcomes] == [("boom", "failed"), ("fine", "done")]
    assert "the store is down" in outcomes[0].detail


def test_only_an_admin_runs_the_periodic_work_from_the_jobs_page(client, django_user_model, monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(periodic, "run_entry", lambda e: ran.append(e.name) or periodic.Outcome(e, "done"))
    viewer = django_user_model.objects.create_user(username="vera", password="a-long-password-1")
    give_roles(viewer, "operator", "approver")
    client.force_login(viewer)
    page = client.get(reverse("jobs:list"))
    assert b"Run every periodic task now" not in page.content
    refused = client.post(reverse("jobs:run-due"), follow=True)
    assert "needs the admin role" in refused.content.decode()
    assert ran == [] and not AuditEvent.objects.filter(action=periodic.RUN_NOW).exists()
    assert client.get(reverse("jobs:run-due")).status_code == 405

    admin = django_user_model.objects.create_user(username="ada", password="a-long-password-1")
    give_roles(admin, "admin")
    client.force_login(admin)
    page = client.get(reverse("jobs:list"))
    assert b"Run every periodic task now" in page.content and b"start-due-deletions" in page.content
    done = client.post(reverse("jobs:run-due"), follow=True)
    assert f"{len(periodic.entries())} periodic tasks ran" in done.content.decode()
    assert ran == [e.name for e in periodic.entries()]
    event = AuditEvent.objects.get(action=periodic.RUN_NOW)
    assert (event.actor_label, event.actor_kind) == ("ada", "user")


def test_with_a_broker_the_tasks_are_sent_to_the_workers(monkeypatch, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    sent: list[str] = []
    from ckptfleet import celery

    class Sent:
        def __init__(self, name: str) -> None:
            self.name = name

        def apply_async(self):
            sent.append(self.name)

    monkeypatch.setattr(periodic, "task", lambda name: Sent(name))
    outcomes = periodic.run_now(actor=OPERATOR)
    assert {o.state for o in outcomes} == {"queued"} and sent == [e.task for e in periodic.entries()]
    assert AuditEvent.objects.get(action=periodic.RUN_NOW).after["mode"] == "queued"
    assert celery.app.conf.beat_schedule  # the same schedule celery beat sends
