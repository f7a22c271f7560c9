"""The retention simulator on a fleet whose bytes and prices are known: kept, dropped, freed, to the cent."""

from __future__ import annotations

from decimal import Decimal

import pytest

from actions.models import DeletionJob
from audit.models import AuditEvent
from retention.rules import KeepRules, Reason
from retention.selectors import Scope, simulate
from tests.conftest import queries_for
from tests.retention.fleet import GIB, Fleet, alpha

RULES = KeepRules(keep_last=1, keep_milestones=True, keep_critical=False)


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet()


def test_it_keeps_by_the_rules_and_the_promises_and_prices_what_it_frees(fleet):
    steps = alpha(fleet)
    sim = simulate(rules=RULES)
    [result] = sim.runs
    kept = {d.checkpoint.step: d.reasons for d in result.plan.kept}
    assert kept == {
        600: (Reason.LAST_N,),
        500: (Reason.NEWEST_RESTORABLE,),
        300: (Reason.PINNED,),
        200: (Reason.MILESTONE,),
    }
    assert {d.checkpoint.step for d in result.plan.dropped} == {400, 100}
    # Step 400: 10 GiB on NVMe at 0.10 + 4 GiB of STANDARD_IA at 0.02; step 100: 10 GiB on NVMe.
    assert result.freed.bytes == 24 * GIB
    assert result.freed.monthly == Decimal("1.00") + Decimal("0.08") + Decimal("1.00")
    assert result.kept.bytes == 40 * GIB
    assert result.kept.monthly == Decimal("4.00")
    assert result.newest_restorable.checkpoint.id == steps[500].pk
    assert result.newest_verified is True
    assert sim.freed.monthly == Decimal("2.08")


def test_a_checkpoint_already_scheduled_is_not_counted_as_freed_again(fleet):
    steps = alpha(fleet)
    fleet.scheduled(steps[100])
    [result] = simulate(rules=RULES).runs
    assert result.freed.bytes == 14 * GIB
    assert result.freed.monthly == Decimal("1.08")
    assert result.scheduled.checkpoints == 1
    assert [d.checkpoint.step for d in result.to_propose] == [400]


def test_a_held_run_keeps_everything(fleet):
    alpha(fleet)
    beta = fleet.run("beta", status="active")
    for step in (1, 2, 3):
        fleet.copy(fleet.checkpoint(beta, step), fleet.nvme, GIB)
    fleet.hold(beta)
    sim = simulate(
        rules=KeepRules(keep_last=1, keep_milestones=False, keep_critical=False), scope=Scope(run_id=beta.pk)
    )
    [result] = sim.runs
    assert result.plan.dropped == ()
    assert all(Reason.HELD in d.reasons for d in result.plan.kept)


def test_scope_narrows_to_a_team(fleet):
    alpha(fleet)
    other = fleet.run("gamma", team=type(fleet.team).objects.create(name="vision"))
    fleet.copy(fleet.checkpoint(other, 1), fleet.nvme, GIB)
    assert [r.run.name for r in simulate(rules=RULES, scope=Scope(team_id=fleet.team.pk)).runs] == ["alpha"]
    assert [r.run.name for r in simulate(rules=RULES).runs] == ["alpha", "gamma"]


def test_the_page_shows_the_plan_and_changes_nothing(fleet, signed_in):
    steps = alpha(fleet)
    run = steps[100].run
    events, jobs = AuditEvent.objects.count(), DeletionJob.objects.count()
    response = signed_in.get(f"/retention/?run={run.pk}&keep_last=1&keep_every=0&keep_milestones=on&keep_stepless=on")
    assert response.status_code == 200
    html = response.content.decode()
    assert "24.0 GiB" in html and "2.08 USD" in html
    assert "the run&#x27;s newest restorable checkpoint" in html
    assert "critical checkpoints are not kept" in html
    assert (AuditEvent.objects.count(), DeletionJob.objects.count()) == (events, jobs)


def test_the_first_visit_simulates_the_default_rules(fleet, signed_in):
    alpha(fleet)
    response = signed_in.get("/retention/")
    assert response.status_code == 200
    assert "Keep the last 5, milestones, critical checkpoints" in response.content.decode()


def test_a_bad_rule_is_a_readable_error(fleet, signed_in):
    response = signed_in.get("/retention/?keep_last=-3&keep_every=x")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Ensure this value is greater than or equal to 0." in html
    assert "Enter a whole number." in html


def test_the_api_gives_the_same_numbers(fleet, signed_in):
    steps = alpha(fleet)
    run = steps[100].run
    response = signed_in.get(f"/api/v1/retention/simulate/?run={run.pk}&keep_last=1&keep_critical=false")
    assert response.status_code == 200
    body = response.json()
    # Step 400's 4 GiB in STANDARD_IA, written today: 30 days of its 30-day minimum left, at 0.02 USD per GiB-month.
    early = {"charge": "0.08", "objects": 2, "bytes": 4 * GIB, "unpriced_objects": 0}
    assert body["freed"] == {
        "checkpoints": 2,
        "bytes": 24 * GIB,
        "monthly": "2.08",
        "unpriced_bytes": 0,
        "early_deletion": early,
    }
    [r] = body["runs"]
    assert r["newest_restorable"] == {"checkpoint": steps[500].pk, "label": "step 500", "verified": True}
    decisions = {c["step"]: c for c in r["checkpoints"]}
    assert decisions[100]["kept"] is False and "critical checkpoints are not kept" in decisions[100]["why_dropped"]
    assert decisions[300]["reasons"] == ["pinned"]
    bad = signed_in.get("/api/v1/retention/simulate/?keep_last=-1")
    assert bad.status_code == 400 and bad.json()["error"]


def test_the_page_makes_as_many_queries_for_many_runs_as_for_one(fleet, signed_in):
    alpha(fleet)
    url = "/retention/?keep_last=1&keep_every=0&keep_milestones=on"
    one = queries_for(signed_in, url)
    for i in range(6):
        run = fleet.run(f"extra-{i}")
        for step in range(4):
            c = fleet.checkpoint(run, step * 10, importance="milestone" if step == 1 else "routine")
            fleet.copy(c, fleet.nvme, GIB)
        fleet.pin(c)
    assert queries_for(signed_in, url) == one
    api = "/api/v1/retention/simulate/?keep_last=1"
    assert queries_for(signed_in, api) <= one


def test_the_run_page_and_the_spend_page_link_to_it(fleet, signed_in):
    steps = alpha(fleet)
    run = steps[100].run
    assert f"/retention/?run={run.pk}" in signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "/retention/" in signed_in.get("/spend/").content.decode()


def test_the_simulator_counts_the_checkpoints_the_run_page_counts_leaving_out_interrupted_saves(fleet):
    """Issue 27 item 8: a left-over of an interrupted save is an orphan, not a checkpoint. The run page and the
    run list leave it out; the simulator counted it, so "keep the last 1" kept the interrupted step 700 and freed
    the complete step 600, and its bytes were priced as the run's."""
    from catalog.models import CheckpointCopy
    from catalog.selectors import run_checkpoints, run_list

    steps = alpha(fleet)
    run = steps[100].run
    interrupted = fleet.copy(fleet.checkpoint(run, 700), fleet.nvme, 3 * GIB)
    leftover = fleet.copy(steps[300], fleet.bucket, 5 * GIB)  # an interrupted upload of step 300 to the bucket
    CheckpointCopy.objects.filter(pk__in=[interrupted.pk, leftover.pk]).update(temporary=True)

    [result] = simulate(rules=RULES).runs
    on_the_page = [c.pk for c in run_checkpoints(run)]
    assert sorted(d.checkpoint.id for d in result.plan.decisions) == sorted(on_the_page)
    assert len(result.plan.decisions) == run_list().get(pk=run.pk).checkpoint_count == 6
    assert {d.checkpoint.step for d in result.plan.kept} == {600, 500, 300, 200}
    assert result.freed.bytes == 24 * GIB and result.kept.bytes == 40 * GIB  # the left-overs are the orphans'
