"""Events cut off after the last anchor (issue 26): on main the chain was anchored every CKPTFLEET_AUDIT_ANCHOR_MINUTES
(60) only, so an intruder with the owner's rights who removed a hold's or a deletion's events and rewound the head
within that window left ``verify_audit`` saying "intact". Now every hold and deletion event is anchored right after
its transaction commits, and the removal is named."""

from __future__ import annotations

import pytest
from django.db import transaction

from actions import services
from audit.models import AuditAnchor, AuditEvent
from audit.verify import audit_verify_all
from tests.actions.conftest import as_ui, build_fleet, make_person
from tests.helpers.audit import record, tamper
from tests.reliability.conftest import report

ROUTINE = 5


def cut_back_to(count: int) -> None:
    """Remove every event after the ``count``th and rewind the head to it, triggers out of the way."""
    keep = list(AuditEvent.objects.order_by("id"))[:count]
    tamper("DELETE FROM catalog_auditevent WHERE id > %s", [keep[-1].pk])
    tamper("UPDATE catalog_auditchainhead SET count = %s, last_hash = %s WHERE id = 1", [count, keep[-1].hash])


@pytest.fixture
def anchored(db, audit_anchor_dir, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(ROUTINE):
            record(f"checkpoint.pin.{i}")
    # Routine events wait for the periodic anchor: none yet.
    assert not AuditAnchor.objects.exists()
    from audit.anchors import anchor_write

    anchor_write()
    return audit_anchor_dir


def test_a_hold_placed_then_erased_with_the_head_rewound_is_caught(anchored, django_capture_on_commit_callbacks):
    fleet = build_fleet()
    before = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        services.hold(
            run=fleet.run, reason="litigation", case_ref="LEG-1", actor=as_ui(make_person("olga", "operator"))
        )
    assert AuditAnchor.objects.filter(count=before + 1).exists()  # anchored right after the hold's commit
    cut_back_to(before)
    problems = audit_verify_all().problems
    assert any(f"says event {before + 1:,} has hash" in p and "events were removed" in p for p in problems)
    report("hold event erased, head rewound, right after the hold", problems[0])


def test_a_deletion_outcome_is_anchored_once_per_transaction(anchored, django_capture_on_commit_callbacks):
    before = AuditAnchor.objects.count()
    base = AuditEvent.objects.count()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        for i in range(3):
            record("deletion.batch", after={"batch": i})
    assert len(callbacks) == 1
    assert AuditAnchor.objects.count() == before + 1
    cut_back_to(base)
    assert any("events were removed" in p for p in audit_verify_all().problems)
