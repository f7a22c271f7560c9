"""Disputed copies (promise 10): never offered for restore, nor for deletion as bad; never touched by a policy.

Copies are built through the real path: two hosts push DCP inventories, one with a flipped checksum, and
verification disputes both (nothing independent says which is right).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from actions import services
from actions.models import DeletionItem, DeletionJob, Hold, Pin
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog import selectors
from catalog.choices import CopyState, Verification
from catalog.models import CheckpointCopy
from catalog.recovery import newest_restorable, newest_restorable_ids
from catalog.recovery_model import recovery_page
from catalog.verification import checkpoints_verify
from ckptfleet.errors import DomainError
from tests.helpers.disputed import FLIPPED, copy_at, dcp

SETTLE = "to settle it: a checksum written at save time"


@pytest.fixture
def disputed(make_host, push):
    """Hosts a and b: step 100 verified on both, step 200 disputed on both (b's has a flipped checksum)."""
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100) + dcp(200))
    push(b, dcp(100) + dcp(200, **FLIPPED))
    return a, b


def snapshot():
    """Everything a deletion may change, to show that a refused one changed nothing."""
    return (
        AuditEvent.objects.exclude(action="access.refused").count(),
        list(Pin.objects.values_list("pk", "unpinned_at")),
        list(Hold.objects.values_list("pk", "released_at")),
        list(DeletionJob.objects.values_list("pk", "state")),
        DeletionItem.objects.count(),
        list(CheckpointCopy.objects.order_by("pk").values_list("pk", "state", "verification", "gone_at")),
    )


def test_the_fixture_really_disputes_both_copies(disputed):
    a, b = disputed
    for kit in (a, b):
        assert (copy_at(kit, 100).state, copy_at(kit, 100).verification) == (CopyState.COMPLETE, Verification.VERIFIED)
        copy = copy_at(kit, 200)
        assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.DISPUTED)
        assert copy.verification_reasons[-1].startswith(SETTLE)


# --- recovery ------------------------------------------------------------------------------------------


def test_recovery_skips_a_disputed_checkpoint_and_says_what_would_settle_it(disputed):
    a, _ = disputed
    run = copy_at(a, 100).checkpoint.run
    recovery = recovery_page(run)
    assert recovery.checkpoint.step == 100 and recovery.verified
    assert {r.copy.checkpoint.step for r in recovery.copies} == {100}
    (line,) = [w for w in recovery.warnings if "step 200" in w]
    assert "step 200 is skipped: it is disputed" in line and SETTLE in line
    assert [s.kind for s in recovery.skipped] == ["disputed"]
    assert newest_restorable(run) == (copy_at(a, 100).checkpoint, True)
    assert newest_restorable_ids([run.pk]) == {run.pk: (copy_at(a, 100).checkpoint_id, True)}


def test_a_run_whose_only_checkpoint_is_disputed_has_nothing_to_restore(make_host, push, signed_in):
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100))
    push(b, dcp(100, **FLIPPED))
    run = copy_at(a, 100).checkpoint.run
    recovery = recovery_page(run)
    assert recovery.checkpoint is None and recovery.copies == []
    assert any("step 100 is skipped: it is disputed" in w and SETTLE in w for w in recovery.warnings)
    html = signed_in.get(f"/recovery/{run.pk}/").content.decode()
    assert "Nothing to restore" in html and "step 100 is skipped: it is disputed" in html
    body = signed_in.get(f"/api/v1/recovery/{run.pk}/").json()
    assert body["checkpoint"] is None and body["copies"] == []


def test_failing_a_verified_checkpoint_recovery_takes_an_unverified_one_and_says_why(make_host, push, signed_in):
    # Step 100 lives only on a (nothing to compare it with); step 200 is disputed between a and b.
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100) + dcp(200))
    push(b, dcp(200, **FLIPPED))
    run = copy_at(a, 100).checkpoint.run
    recovery = recovery_page(run)
    assert recovery.checkpoint.step == 100 and not recovery.verified
    assert [r.copy.pk for r in recovery.copies] == [copy_at(a, 100).pk]
    assert any("no copy of it is verified" in w and "this is the only copy" in w for w in recovery.warnings)
    assert any("step 200 is skipped: it is disputed" in w for w in recovery.warnings)
    body = signed_in.get(f"/api/v1/recovery/{run.pk}/").json()
    assert body["label"] == "step 100" and body["verified"] is False
    assert {c["copy"] for c in body["copies"]} == {copy_at(a, 100).pk}
    html = signed_in.get(f"/recovery/{run.pk}/").content.decode()
    assert "Best available:" in html and "step 200 is skipped: it is disputed" in html


def test_a_disputed_copy_among_the_restore_points_copies_is_listed_without_a_command(make_host, push):
    # Three hosts: a and b agree on step 100, c alone has step 200 (unverified), and step 200 at d is flipped
    # against c: the recovery point is step 100 (verified), and step 200 is passed over as disputed.
    a, b, c, d = (make_host(n) for n in ("gpu-a01", "gpu-b01", "gpu-c01", "gpu-d01"))
    push(a, dcp(100))
    push(b, dcp(100))
    push(c, dcp(200))
    push(d, dcp(200, **FLIPPED))
    recovery = recovery_page(copy_at(a, 100).checkpoint.run)
    assert recovery.checkpoint.step == 100
    for skipped in recovery.skipped:
        assert skipped.kind == "disputed"
    everything = [*recovery.copies, *recovery.unusable, *(f.best for f in recovery.fallbacks if f.best)]
    assert all(r.copy.verification != Verification.DISPUTED for r in everything)


def test_the_recovery_api_passes_over_a_disputed_checkpoint_and_says_what_would_settle_it(make_host, push, client):
    a, b, c, d = (make_host(n) for n in ("gpu-a01", "gpu-b01", "gpu-c01", "gpu-d01"))
    push(a, dcp(100))
    push(b, dcp(100))
    push(c, dcp(200))
    push(d, dcp(200, **FLIPPED))
    client.force_login(User.objects.create_superuser("oncall", password="x"))
    body = client.get(f"/api/v1/recovery/{copy_at(a, 100).checkpoint.run_id}/").json()
    assert body["label"] == "step 100" and body["verified"] is True
    assert all(c["verification"] == "verified" and c["verification_basis"] == "peers" for c in body["copies"])
    (skipped,) = body["skipped"]
    assert (skipped["label"], skipped["kind"]) == ("step 200", "disputed")
    assert "to settle it" in skipped["why"]


# --- deletion -------------------------------------------------------------------------------------------


def test_deleting_a_disputed_copy_alone_is_refused_naming_promise_10(disputed, signed_in_as):
    a, _ = disputed
    operator = signed_in_as("operator").user
    copy = copy_at(a, 200)
    preview = services.preview(checkpoint=copy.checkpoint, copy=copy)
    assert not preview.allowed and preview.promise == 10 and preview.refusal_code == "disputed"
    assert "disputed" in preview.refusal and "not deleted as bad on the other copy's word" in preview.refusal
    assert "promise" not in preview.refusal.lower()  # the person's words, not the product's numbering
    before = snapshot()
    with pytest.raises(DomainError, match="not deleted as bad on the other copy's word"):
        services.schedule_deletion(
            checkpoint=copy.checkpoint, copy=copy, reason="looks bad", actor=Actor.person(operator, EventSource.UI)
        )
    assert snapshot() == before
    # The whole checkpoint is a person's call and may go: nothing is condemned on another copy's word.
    assert services.preview(checkpoint=copy.checkpoint).allowed


def test_a_policy_never_deletes_a_checkpoint_with_a_disputed_copy(disputed):
    a, _ = disputed
    checkpoint = copy_at(a, 200).checkpoint
    assert services.preview(checkpoint=checkpoint, origin="policy:7").promise == 12
    before = snapshot()
    with pytest.raises(DomainError, match="a policy never deletes what it cannot positively identify"):
        services.schedule_deletion(
            checkpoint=checkpoint, reason="retention", actor=services.Actor.command(label="t"), origin="policy:7"
        )
    assert snapshot() == before


def test_the_bulk_deletion_of_disputed_copies_refuses_each_and_changes_nothing(disputed, signed_in_as):
    a, b = disputed
    client = signed_in_as("operator")
    items = [f"{c.checkpoint_id}:{c.pk}" for c in (copy_at(a, 200), copy_at(b, 200))]
    before = snapshot()
    response = client.get("/actions/bulk/", {"action": "delete-copy", "item": items})
    preview = response.context["preview"]
    assert preview.allowed == [] and {i.promise for i in preview.refused} == {10}
    body = {
        "action": "delete",
        "items": [{"checkpoint": int(i.split(":")[0]), "copy": int(i.split(":")[1])} for i in items],
    }
    data = client.post("/api/v1/actions/bulk/", {**body, "reason": "bad", "confirm": True}, "application/json").json()
    assert not data.get("done") and len(data["refused"]) == 2
    assert snapshot() == before


# --- the overview and the queues --------------------------------------------------------------------------


def test_the_overview_counts_disputed_copies_and_their_queue_says_what_would_settle_them(disputed, signed_in):
    a, b = disputed
    html = signed_in.get("/").content.decode()
    assert "Disputed copies</strong></a>:\n      2 copies" in html
    page = signed_in.get("/queue/copies/?kind=disputed")
    assert [c.pk for c in page.context["copies"]] == sorted([copy_at(a, 200).pk, copy_at(b, 200).pk], reverse=True)
    text = page.content.decode()
    assert SETTLE in text and "nothing independent says which is right" in text
    assert 'value="delete-copy"' not in text and 'value="delete-checkpoint"' in text
    for kind in ("corrupt", "mismatch", "partial"):
        assert signed_in.get(f"/queue/copies/?kind={kind}").context["copies"] == []


def test_a_disputed_copy_is_left_out_of_the_corrupt_queue_whatever_its_state(disputed, signed_in):
    a, _ = disputed
    CheckpointCopy.objects.filter(pk=copy_at(a, 200).pk).update(state=CopyState.CORRUPT)
    assert signed_in.get("/queue/copies/?kind=corrupt").context["copies"] == []
    assert copy_at(a, 200).pk in [c.pk for c in signed_in.get("/queue/copies/?kind=disputed").context["copies"]]


def test_the_checkpoint_page_says_disputed_once_each_and_what_decided_the_others(disputed, signed_in):
    a, _ = disputed
    page = signed_in.get(f"/checkpoints/{copy_at(a, 200).checkpoint_id}/").content.decode()
    assert "Disputed: not offered for restore, nor for deletion as bad" in page
    reason = copy_at(a, 200).verification_reasons[0]
    assert page.count(f"<li>{reason}</li>") == 1
    verified = signed_in.get(f"/checkpoints/{copy_at(a, 100).checkpoint_id}/").content.decode()
    assert "decided by the other copies agree" in verified and "Last verified" in verified and "today" in verified
    summary = selectors.verification_summary([copy_at(a, 200).checkpoint_id])[copy_at(a, 200).checkpoint_id]
    assert summary.verified == 0


def test_a_reason_recorded_as_both_a_state_and_a_verification_reason_is_shown_once(disputed, signed_in):
    a, _ = disputed
    copy = copy_at(a, 100)
    text = "__1_0.distcp: sha256 differs from the copies at x and y, which agree with each other (2 of 3 copies)"
    CheckpointCopy.objects.filter(pk=copy.pk).update(
        state=CopyState.CORRUPT, reasons=[text, text], verification=Verification.MISMATCH, verification_reasons=[text]
    )
    page = signed_in.get(f"/checkpoints/{copy.checkpoint_id}/").content.decode()
    assert page.count(text) == 1
    queue = signed_in.get("/queue/copies/?kind=mismatch").content.decode()
    assert queue.count(text) == 1


def test_the_run_page_says_a_reason_recorded_twice_once(disputed, signed_in):
    a, _ = disputed
    copy = copy_at(a, 100)
    text = "__1_0.distcp: sha256 differs from the copies at x and y, which agree with each other (2 of 3 copies)"
    CheckpointCopy.objects.filter(pk=copy.pk).update(
        state=CopyState.CORRUPT, reasons=[text, text], verification=Verification.MISMATCH, verification_reasons=[text]
    )
    page = signed_in.get(f"/runs/{copy.checkpoint.run_id}/").content.decode()
    assert page.count(text) == 1
    problems = signed_in.get(f"/problems/?run={copy.checkpoint.run_id}").content.decode()
    assert problems.count(text) == 1


def test_verification_records_since_when_a_copy_is_disputed_and_the_problems_list_shows_it(disputed, signed_in):
    a, _ = disputed
    copy = copy_at(a, 200)
    assert copy.verification == Verification.DISPUTED and copy.verification_changed_at is not None
    settled = copy_at(a, 100)  # verified when it was first judged, and unchanged since: its time stays
    stamped = settled.verification_changed_at
    assert stamped is not None
    checkpoints_verify([settled.checkpoint_id])
    settled.refresh_from_db()
    assert settled.verification_changed_at == stamped
    rows = signed_in.get("/api/v1/problems/?kind=disputed").json()["results"]
    mine = next(r for r in rows if r["copy"] == copy.pk)
    assert mine["since"] == copy.verification_changed_at.isoformat().replace("+00:00", "Z")
