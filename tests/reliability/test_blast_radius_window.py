"""The reliability scorecard, issue 26 item 3: the blast radius counts deletions over a window, not per job.

The attack: four checkpoints holding 80% of a run's bytes, deleted in one bulk call, became four jobs of 20% each
that needed no approval, while one job of the same size needs two approvers. Now a bulk call is one request for the
limits, and every deletion of the run and of the person within ``CKPTFLEET_BLAST_WINDOW_HOURS`` (24) counts:
the four jobs each wait for two approvers, and so does the third of three separate 20% deletions, until the
window has passed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from access.roles import Role
from actions import services
from actions.models import DeletionJob, DeletionState
from audit.models import AuditEvent
from tests.helpers.approvals import person
from tests.reliability.conftest import report
from tests.retention.fleet import Fleet

pytestmark = pytest.mark.django_db
MIB = 1024**2


@pytest.fixture
def five(settings):
    """A run of five checkpoints of 1 MiB each (20% of the run apiece), far below the approval threshold."""
    settings.DELETION_APPROVAL_BYTES = 10 * 1024**4
    settings.BLAST_MAX_RUN_PERCENT = 50
    settings.BLAST_WINDOW_HOURS = 24
    fleet = Fleet()
    run = fleet.run("llama-70b")
    checkpoints = [fleet.checkpoint(run, step * 100) for step in range(1, 6)]
    for ck in checkpoints:
        fleet.copy(ck, fleet.bucket, MIB)
    return checkpoints


def test_one_bulk_call_of_four_fifths_of_a_run_needs_two_approvers(five, django_user_model):
    olga = person(django_user_model, "olga", Role.OPERATOR)
    client = Client()
    client.force_login(olga.user)
    body = {
        "action": "delete",
        "items": [{"checkpoint": ck.pk} for ck in five[:4]],
        "reason": "superseded",
        "confirm": True,
    }
    response = client.post("/api/v1/actions/bulk/", body, content_type="application/json")
    assert response.status_code == 200, response.content
    jobs = list(DeletionJob.objects.order_by("pk"))
    assert len(jobs) == 4
    assert all(j.state == DeletionState.AWAITING_APPROVAL and j.approvals_required == 2 for j in jobs), [
        (j.state, j.approvals_required, j.approval_reasons) for j in jobs
    ]
    events = AuditEvent.objects.filter(action="deletion.schedule").order_by("pk")
    assert [e.after["approvals_required"] for e in events] == [2, 2, 2, 2]
    assert "80%" in jobs[0].approval_reasons[-1], jobs[0].approval_reasons
    report("bulk call deleting 80% of a run as four jobs", "4 of 4 jobs need two approvers")


def test_separate_calls_add_up_within_the_window_and_not_after_it(five, django_user_model):
    olga = person(django_user_model, "olga", Role.OPERATOR)
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        first = services.schedule_deletion(checkpoint=five[0], reason="one", actor=olga)
        second = services.schedule_deletion(checkpoint=five[1], reason="two", actor=olga)
        third = services.schedule_deletion(checkpoint=five[2], reason="three", actor=olga)
    assert (first.approvals_required, second.approvals_required, third.approvals_required) == (0, 0, 2)
    assert any("in 24 hours" in r for r in third.approval_reasons), third.approval_reasons
    # A cancelled deletion deletes nothing and does not count; the window passing forgets the rest.
    DeletionJob.objects.filter(pk=third.pk).update(state=DeletionState.CANCELLED)
    with time_machine.travel(start + timedelta(hours=25), tick=False):
        fourth = services.schedule_deletion(checkpoint=five[3], reason="four", actor=olga)
    assert fourth.approvals_required == 0, fourth.approval_reasons
    assert AuditEvent.objects.filter(action="deletion.schedule").count() == 4
    report("three 20% deletions of one run in separate calls within 24 h", "the third needs two approvers")
