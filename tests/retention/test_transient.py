"""Transient checkpoints are the first a policy offers to remove; the simulator prices the early-deletion charge.

Run llm/beta, finished: steps 100-600 on NVMe (10 GiB each, 0.10 USD per GiB-month), all verified. Steps 300 and
500 are transient; step 600, the newest, is transient too, and still kept: it is the newest restorable one.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from actions.models import DeletionJob
from audit.actor import Actor
from retention import services
from retention.rules import KeepRules, Reason
from retention.selectors import Scope, simulate
from tests.retention.fleet import GIB, Fleet

TRANSIENT = (300, 500, 600)


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet()


@pytest.fixture
def beta(fleet):
    fleet.price(fleet.nvme, "nvme", "0.10")
    run = fleet.run("beta")
    steps = {}
    for step in (100, 200, 300, 400, 500, 600):
        steps[step] = fleet.checkpoint(run, step, importance="transient" if step in TRANSIENT else "routine")
        fleet.copy(steps[step], fleet.nvme, 10 * GIB)
    return run, steps


def test_keep_last_and_every_mth_do_not_keep_transient_ones_but_the_promises_do(beta, fleet):
    run, steps = beta
    fleet.pin(steps[300])
    [result] = simulate(rules=KeepRules(keep_last=2, keep_every=100), scope=Scope(run_id=run.pk)).runs
    kept = {d.checkpoint.step: d.reasons for d in result.plan.kept}
    # The last 2 are counted among the routine ones (400 and 200); every 100th keeps only routine ones.
    assert kept == {
        600: (Reason.NEWEST_RESTORABLE,),
        400: (Reason.LAST_N, Reason.EVERY_MTH),
        300: (Reason.PINNED,),
        200: (Reason.LAST_N, Reason.EVERY_MTH),
        100: (Reason.EVERY_MTH,),
    }
    [dropped] = result.plan.dropped
    assert dropped.checkpoint.step == 500 and dropped.why_dropped.startswith("transient: kept only where a promise")


def test_the_simulator_lists_transient_ones_first_with_their_importance(beta, signed_in):
    run, steps = beta
    [result] = simulate(rules=KeepRules(keep_last=1), scope=Scope(run_id=run.pk)).runs
    assert [d.checkpoint.step for d in result.plan.dropped] == [500, 300, 200, 100]
    body = signed_in.get(f"/api/v1/retention/simulate/?run={run.pk}&keep_last=1").json()
    listed = [(c["step"], c["importance"], c["kept"]) for c in body["runs"][0]["checkpoints"]]
    assert listed[:2] == [(500, "transient", False), (300, "transient", False)]
    assert [s for s, _, kept in listed if kept] == [600, 400]
    html = signed_in.get(f"/retention/?run={run.pk}&keep_last=1&keep_every=0").content.decode()
    assert html.index(f"/checkpoints/{steps[500].pk}/") < html.index(f"/checkpoints/{steps[200].pk}/")
    assert 'badge--info">transient</span>' in html
    assert "marked <strong>transient</strong> are kept only where one of those promises requires it" in html


def test_a_policy_proposes_transient_ones_first(beta):
    run, steps = beta
    policy = services.policy_create(
        actor=Actor.command(label="tests"), name="keep 1", run=run, keep_last=1, enabled=True
    )
    proposal = services.policy_propose(policy_id=policy.pk)
    assert proposal.scheduled == [steps[500].pk, steps[300].pk, steps[200].pk, steps[100].pk]
    first = DeletionJob.objects.order_by("pk").first()
    assert first.checkpoint_id == steps[500].pk and "transient" in first.reason


def test_the_simulator_totals_show_the_early_deletion_charge(fleet, signed_in):
    fleet.price(fleet.nvme, "nvme", "0.10")
    fleet.price(fleet.bucket, "archive", "0.30", "GLACIER")
    run = fleet.run("gamma")
    old, new = fleet.checkpoint(run, 100), fleet.checkpoint(run, 200)
    for c in (old, new):
        fleet.copy(c, fleet.nvme, 10 * GIB)
    # Step 100 also in GLACIER, written 10 days ago: 80 of its 90 days left, on 3 GiB = 3 x 0.30 x 80 / 30 = 2.40.
    fleet.copy(old, fleet.bucket, 3 * GIB, files=3, tier="archive", storage_class="GLACIER", age_days=10)
    sim = simulate(rules=KeepRules(keep_last=1), scope=Scope(run_id=run.pk))
    assert sim.freed.early_deletion.objects == 3 and sim.freed.early_deletion.bytes == 3 * GIB
    assert sim.freed.early_deletion.charge.quantize(Decimal("0.01")) == Decimal("2.40")
    assert sim.kept.early_deletion.objects == 0
    body = signed_in.get(f"/api/v1/retention/simulate/?run={run.pk}&keep_last=1").json()
    assert body["freed"]["early_deletion"] == {"charge": "2.40", "objects": 3, "bytes": 3 * GIB, "unpriced_objects": 0}
    html = signed_in.get(f"/retention/?run={run.pk}&keep_last=1&keep_every=0").content.decode()
    assert "Early-deletion charge" in html and "2.40 USD" in html and "3 objects younger than their class" in html


def test_none_young_shows_zero_plainly_in_the_simulator(beta, signed_in):
    run, _ = beta
    html = signed_in.get(f"/retention/?run={run.pk}&keep_last=1&keep_every=0").content.decode()
    assert "0.00 USD" in html and "0 objects younger than their class" in html
