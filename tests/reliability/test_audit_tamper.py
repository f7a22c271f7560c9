"""Audit tamper, as the reliability scorecard tries it: an intruder with the database owner's rights (triggers
disabled) rewrites events by direct SQL and re-hashes them so the chain is consistent again, with and without the
audit key, or cuts events off the end and rewinds the head. The verifier must name each, against the anchors
written to a signed file and to an Object Lock COMPLIANCE bucket on a real S3 endpoint (moto's server).

Each case prints what it checked: events walked and anchors compared.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from django.db import DatabaseError, connection, transaction

from audit.anchors import FileAnchorStore, anchor_write
from audit.models import AuditChainHead, AuditEvent
from audit.services import UNKEYED, event_fields, event_hash
from audit.verify import audit_verify_all
from fleet.audit_anchors import S3AnchorStore
from tests.helpers.audit import record, tamper

EVENTS = 600
ANCHOR_EVERY = 100


@pytest.fixture
def anchored_trail(db, s3, audit_anchor_dir):
    """EVENTS events, anchored every ANCHOR_EVERY of them to a signed file and an Object Lock bucket."""
    bucket = s3.bucket(object_lock=True)
    stores = [
        FileAnchorStore(audit_anchor_dir),
        S3AnchorStore(f"s3://{bucket}/audit/", endpoint_url=s3.url, region_name="us-east-1", addressing_style="path"),
    ]
    for i in range(1, EVENTS + 1):
        record(f"checkpoint.pin.{i}", reason=f"routine {i}", after={"pinned": True, "n": i})
        if i % ANCHOR_EVERY == 0:
            assert all(a.outcome == "written" for a in anchor_write(stores=stores))
    report = audit_verify_all(stores=stores)
    assert report.ok and report.events_checked == EVENTS and report.anchors_checked == 2 * EVENTS // ANCHOR_EVERY
    return stores


def rewrite_and_rehash(position: int, *, sign) -> None:
    """Change the event at ``position`` (1 = oldest), re-hash it and every later one with ``sign(prev, event)``
    (returning (alg, hash)), and move the head to the new last hash: all by SQL, triggers disabled."""
    events = list(AuditEvent.objects.order_by("id"))
    prev = events[position - 2].hash
    rows = []
    for index, event in enumerate(events[position - 1 :]):
        if index == 0:
            event.reason = "never pinned: nothing to see"
        event.prev_hash = prev
        event.alg, event.hash = sign(prev, event)
        rows.append([event.reason, event.prev_hash, event.alg, event.hash, event.pk])
        prev = event.hash
    tamper(
        "UPDATE catalog_auditevent SET reason = %s, prev_hash = %s, alg = %s, hash = %s WHERE id = %s", rows, many=True
    )
    tamper("UPDATE catalog_auditchainhead SET last_hash = %s WHERE id = 1", [prev])


def report_of(name: str, stores, capsys):
    report = audit_verify_all(stores=stores)
    with capsys.disabled():
        print(
            f"\naudit tamper [{name}]: {report.events_checked:,} events checked, {report.anchors_checked:,} anchors "
            f"compared, {len(report.problems)} problem(s); first: {report.problems[0] if report.problems else '-'}"
        )
    return report


def test_a_rewrite_rehashed_without_the_key_breaks_the_chain(anchored_trail, capsys):
    def unkeyed(prev, event):  # the old chain's recipe: anyone can compute it
        return UNKEYED, event_hash(prev, event_fields(event), UNKEYED)

    rewrite_and_rehash(250, sign=unkeyed)
    report = report_of("rehashed without the key", anchored_trail, capsys)
    assert not report.ok
    assert report.problems[0].startswith(f"the chain is broken at event {AuditEvent.objects.order_by('id')[249].pk}")
    assert "without the key" in report.problems[0]
    assert report.events_checked == 249


def test_a_rewrite_rehashed_with_a_guessed_key_breaks_the_chain(anchored_trail, capsys):
    alg = AuditEvent.objects.order_by("id").first().alg

    def guessed(prev, event):
        return alg, hmac.new(b"not-the-key" * 4, f"{prev}{event.pk}".encode(), hashlib.sha256).hexdigest()

    rewrite_and_rehash(250, sign=guessed)
    report = report_of("rehashed with a guessed key", anchored_trail, capsys)
    assert not report.ok and "does not match its hash" in report.problems[0]


def test_a_rewrite_rehashed_with_the_real_key_is_caught_by_every_later_anchor(anchored_trail, capsys):
    def with_the_key(prev, event):  # an insider who holds the audit key too
        return event.alg, event_hash(prev, event_fields(event), event.alg)

    rewrite_and_rehash(250, sign=with_the_key)
    report = report_of("rehashed with the real key", anchored_trail, capsys)
    assert report.events_checked == EVENTS  # the chain alone looks intact
    # Anchors at 300, 400, 500 and 600, in the file and in the bucket: eight disagreements, each named.
    assert len(report.problems) == 8
    assert all("events up to it were rewritten" in p for p in report.problems)
    assert any(p.startswith("anchor of ") and "says event 300 has hash" in p for p in report.problems)


def test_events_cut_off_the_end_with_the_head_rewound_are_caught(anchored_trail, capsys):
    events = list(AuditEvent.objects.order_by("id"))
    keep = events[:450]
    tamper("DELETE FROM catalog_auditevent WHERE id > %s", [keep[-1].pk])
    tamper("UPDATE catalog_auditchainhead SET count = %s, last_hash = %s WHERE id = 1", [450, keep[-1].hash])
    report = report_of("tail removed, head rewound", anchored_trail, capsys)
    assert report.events_checked == 450
    assert len(report.problems) == 4  # anchors at 500 and 600, in both stores
    assert all("the database has only 450 events: events were removed" in p for p in report.problems)


def test_without_disabling_triggers_the_head_cannot_be_rewound_at_all(anchored_trail, capsys):
    events = list(AuditEvent.objects.order_by("id"))
    if connection.vendor == "sqlite":
        from tests.helpers.audit import sqlite_triggers

        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            present = {row[0] for row in cursor.fetchall()}
            for name, statement in sqlite_triggers().items():
                if name not in present:
                    cursor.execute(statement)
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE catalog_auditchainhead SET count = 450, last_hash = %s WHERE id = 1", [events[449].hash])
    assert AuditChainHead.objects.get(pk=1).count == EVENTS
    report = report_of("head rewind refused", anchored_trail, capsys)
    assert report.ok and report.events_checked == EVENTS
