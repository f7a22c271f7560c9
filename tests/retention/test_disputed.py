"""Fail closed (promise 12): a policy never schedules the deletion or demotion of a checkpoint with a disputed
copy, and its dry run and the what-if say why it is kept.

Copies come through the ingest: two hosts, step 200 with a flipped checksum on one of them, so both copies of
step 200 are disputed; steps 100 and 300 agree and are verified.
"""

from __future__ import annotations

import pytest

from actions.models import DeletionJob
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, Run
from retention import services
from retention.rules import KeepRules, Reason
from retention.selectors import Scope, simulate
from retention.tiering import Move, tiering_whatif
from tests.helpers.disputed import FLIPPED, dcp

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _inventories_count_as_fresh(settings):
    """The pushed inventories say they were taken on 2026-11-21; fail closed on stale evidence is tested apart."""
    settings.POLICY_EVIDENCE_HOURS = 10**6


@pytest.fixture
def run(make_host, push):
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100) + dcp(200) + dcp(300))
    push(b, dcp(100) + dcp(200, **FLIPPED) + dcp(300))
    return Run.objects.get(name="llama-7b")


def step(run: Run, n: int) -> Checkpoint:
    return Checkpoint.objects.get(run=run, step=n)


def test_the_dry_run_keeps_a_disputed_checkpoint_and_says_why(run):
    sim = simulate(rules=KeepRules(keep_last=1), scope=Scope(run_id=run.pk))
    (result,) = sim.runs
    decisions = {d.checkpoint.step: d for d in result.plan.decisions}
    assert decisions[300].reasons[:1] == (Reason.NEWEST_RESTORABLE,)
    assert Reason.DISPUTED in decisions[200].reasons and decisions[200].kept
    assert not decisions[100].kept
    assert [d.checkpoint.step for d in sim.disputed] == [200]
    assert "disputed: its copies disagree" in ", ".join(decisions[200].reason_labels)


def test_a_policy_proposes_what_its_rules_drop_but_never_the_disputed_checkpoint(run):
    actor = Actor.command(label="tests")
    policy = services.policy_create(actor=actor, name="keep 1", run=run, keep_last=1, enabled=True)
    proposal = services.policy_propose(policy_id=policy.pk)
    assert proposal.scheduled == [step(run, 100).pk]
    assert not DeletionJob.objects.filter(checkpoint=step(run, 200)).exists()
    assert AuditEvent.objects.filter(action="deletion.schedule").count() == 1


def test_the_dry_run_page_and_api_say_a_disputed_checkpoint_is_kept(run, signed_in):
    html = signed_in.get("/retention/", {"run": run.pk, "keep_last": 1, "keep_every": 0}).content.decode()
    assert "1 disputed checkpoint kept whatever the rules say" in html
    assert "disputed: its copies disagree and nothing independent says which is right" in html
    actor = Actor.command(label="tests")
    policy = services.policy_create(actor=actor, name="keep 1", run=run, keep_last=1)
    dry = signed_in.get(f"/api/v1/retention/policies/{policy.pk}/dry-run/").json()
    (row,) = dry["runs"]
    by_step = {c["step"]: c for c in row["checkpoints"]}
    assert "disputed" in by_step[200]["reasons"] and by_step[200]["kept"] is True


def test_the_tiering_what_if_leaves_a_disputed_checkpoint_where_it_is(run):
    Run.objects.filter(pk=run.pk).update(status="finished")
    whatif = tiering_whatif(move=Move(to_class="GLACIER_IR", scope=Scope(run_id=run.pk)))
    assert whatif.total.disputed_checkpoints == 1 and whatif.total.checkpoints == 2
    assert whatif.total.disputed_bytes == 2 * (900 + 2 * 4096)
