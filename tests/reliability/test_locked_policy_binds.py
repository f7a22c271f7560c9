"""The reliability scorecard, issue 26 item 2: a locked retention policy binds every policy that covers its runs.

The attack: the team's policy keeps the last 11 and is locked (binding, past its cooling-off). A requester and one
approver enable a run-level policy keeping the last 1 for one of the team's runs. On main the run policy took the
run out of the team policy and proposed 11 of its 12 checkpoints for deletion. Now the strictest keep wins: the run
policy proposes only what the locked policy also drops, and the simulator names the locked policy that keeps each
of the others.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from access.roles import Role
from actions.models import DeletionJob
from audit.models import AuditEvent
from retention import services
from retention.models import RetentionPolicy
from retention.selectors import Scope, simulate
from tests.helpers.approvals import approve_waiting, person
from tests.reliability.conftest import report
from tests.retention.fleet import GIB, Fleet

pytestmark = pytest.mark.django_db


def test_a_run_policy_keeping_less_cannot_walk_a_run_out_of_a_locked_team_policy(django_user_model):
    olga = person(django_user_model, "olga", Role.OPERATOR)
    abe = person(django_user_model, "abe", Role.APPROVER)
    fleet = Fleet()
    run = fleet.run("llama-70b")
    for step in range(1, 13):
        fleet.copy(fleet.checkpoint(run, step * 100), fleet.bucket, GIB)
    team = services.policy_create(actor=olga, name="llm keeps 11", team=fleet.team, keep_last=11, enabled=True)
    approve_waiting(team.pk, by=abe)
    services.policy_lock(policy_id=team.pk, actor=abe, reason="the audit needs 11")
    past = timezone.now() - timedelta(seconds=1)
    RetentionPolicy.objects.filter(pk=team.pk).update(
        locked_at=past - timedelta(hours=72), lock_cooling_off_ends_at=past
    )

    sneaky = services.policy_create(
        actor=olga, name="just the last one", run=run, keep_last=1, keep_milestones=False, enabled=True
    )
    approve_waiting(sneaky.pk, by=abe)
    sneaky.refresh_from_db()
    assert sneaky.enabled

    # The simulator shows which policy keeps what.
    sim = simulate(rules=sneaky.rules, scope=Scope(run_id=run.pk))
    plan = sim.runs[0].plan
    assert len(plan.kept) == 11 and len(plan.dropped) == 1
    by_lock = [d for d in plan.kept if d.kept_by]
    assert len(by_lock) >= 10
    assert all(any("llm keeps 11" in label for label in d.reason_labels) for d in by_lock)

    proposal = services.policy_propose(policy_id=sneaky.pk)
    assert len(proposal.scheduled) == 1, proposal
    assert DeletionJob.objects.count() == 1
    assert DeletionJob.objects.get().checkpoint.step == 100
    assert AuditEvent.objects.filter(action="deletion.schedule").count() == 1
    report("run policy keeping 1 under a locked team policy keeping 11", f"{len(proposal.scheduled)} of 12 proposed")
