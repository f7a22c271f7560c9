"""The demo carries out what a person starts: a deletion of host files goes from scheduled to approved to executed
by the periodic work (``fleet_beat``) and the demo hosts' agents (``demo_agents``: the real agent code over HTTP
against the live server), with the demo's grace period in minutes. Development settings, as `make demo` runs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from actions import services
from actions.models import DeletionJob, DeletionState
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import CheckpointCopy
from tests.helpers.browser import checkpoint_of
from tests.helpers.deletion import make_due
from tests.helpers.demo_seed import seed_demo

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


@pytest.fixture
def demo(live_server, settings, tmp_path_factory):
    settings.DEBUG = True
    settings.DELETION_GRACE_MINUTES = 3
    return seed_demo(settings, tmp_path_factory.getbasetemp(), variant="grace of 3 minutes")


def test_a_host_deletion_runs_to_the_end_by_the_periodic_work_and_the_demo_agents(demo, live_server, django_user_model):
    operator = Actor.person(django_user_model.objects.get(username="demo-operator"), EventSource.UI)
    approver = Actor.person(django_user_model.objects.get(username="demo-approver"), EventSource.UI)
    step = checkpoint_of("gpt-megatron", 200)
    copies = list(CheckpointCopy.objects.filter(checkpoint=step, gone_at__isnull=True).select_related("location"))
    assert copies and all(c.location.host_id for c in copies)
    files = [p for c in copies for p in (Path(c.location.root_path) / c.path).rglob("*") if p.is_file()]
    assert files

    job = services.schedule_deletion(checkpoint=step, reason="superseded", actor=operator)
    if job.state == DeletionState.AWAITING_APPROVAL:
        job = services.approve(job=job, actor=approver)
    assert job.state == DeletionState.SCHEDULED
    out = io.StringIO()
    call_command("fleet_beat", "--once", stdout=out)  # within its three minutes: nothing starts
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.SCHEDULED
    make_due(job)  # three minutes later
    call_command("fleet_beat", "--once", stdout=out)
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.RUNNING  # handed to the hosts' agents
    said = io.StringIO()
    call_command("demo_agents", "--server", live_server.url, "--dir", str(demo), "--once", stdout=said, stderr=said)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, (job.outcome, said.getvalue())
    assert not any(p.exists() for p in files if "trash" not in str(p))
    assert "lustre-gw1 deletions:" in said.getvalue() and " failed (" not in said.getvalue(), said.getvalue()


def test_the_demo_agents_refuse_outside_development(settings, db):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="CKPTFLEET_DEBUG=1"):
        call_command("demo_agents", "--server", "http://127.0.0.1:9/", "--once")


def test_the_demo_agents_report_the_hardware_the_demo_plays_not_the_development_disk(demo, live_server):
    from fleet.models import StorageLocation

    seeded = {loc.pk: loc.fs_reported_at for loc in StorageLocation.objects.filter(host__isnull=False)}
    said = io.StringIO()
    call_command("demo_agents", "--server", live_server.url, "--dir", str(demo), "--once", stdout=said, stderr=said)
    assert " failed (" not in said.getvalue(), said.getvalue()
    for loc in StorageLocation.objects.filter(host__isnull=False):
        drive = 2 * 10**15 if loc.kind == "pfs" else 7_680_000_000_000
        assert loc.fs_size_bytes % drive == 0 and 60 <= loc.fs_used_percent <= 90, loc
        assert loc.fs_reported_at >= seeded[loc.pk]
    # gpu-a01 was seeded first, seconds before its agent reported: these figures came through the receive.
    first = StorageLocation.objects.get(host__name="gpu-a01")
    assert first.fs_reported_at > seeded[first.pk]
