"""Anchors: the chain head written outside the database (a signed JSON-lines file; an Object Lock COMPLIANCE object
on a real S3 endpoint, moto's server), and the verifier checking the database against every one of them."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from django.core.management import CommandError, call_command

from audit.anchors import FileAnchorStore, anchor_write, configured_stores, read_anchor
from audit.choices import AnchorOutcome, AnchorTarget
from audit.models import AuditAnchor, AuditChainHead, AuditEvent, AuditVerification
from audit.services import event_fields, event_hash
from audit.tasks import anchor_audit_chain, verify_audit_scheduled
from audit.verify import audit_verify_all
from ckptfleet.celery import app as celery_app
from fleet.audit_anchors import S3AnchorStore
from tests.helpers.audit import record, tamper


def anchor_lines(directory) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def rehash_from(position: int) -> None:
    """Rewrite the event at ``position`` (1 = oldest) and re-hash it and every later event with the real key, then
    move the head to match: the rewrite of someone who holds the key and the database owner's rights."""
    events = list(AuditEvent.objects.order_by("id"))
    prev = events[position - 2].hash if position > 1 else "0" * 64
    for index, event in enumerate(events[position - 1 :]):
        if index == 0:
            event.reason = "rewritten"
        event.prev_hash = prev
        event.hash = event_hash(prev, event_fields(event), event.alg)
        tamper(
            "UPDATE catalog_auditevent SET reason = %s, prev_hash = %s, hash = %s WHERE id = %s",
            [event.reason, event.prev_hash, event.hash, event.pk],
        )
        prev = event.hash
    tamper("UPDATE catalog_auditchainhead SET last_hash = %s WHERE id = 1", [prev])


# --- the signed file ---------------------------------------------------------------------------------------------


def test_an_anchor_is_a_signed_line_with_the_head_and_a_record_of_where(db, audit_anchor_dir, settings):
    events = [record(f"a.{i}") for i in range(3)]
    [written] = anchor_write()
    [line] = anchor_lines(audit_anchor_dir)
    assert (line["count"], line["last_hash"], line["key_id"]) == (3, events[-1].hash, settings.AUDIT_KEY_ID)
    assert len(line["signature"]) == 64
    assert (written.target, written.outcome, written.count, written.last_hash) == (
        "file",
        "written",
        3,
        events[-1].hash,
    )
    assert written.location.startswith(str(audit_anchor_dir))
    for key in settings.AUDIT_KEYS.values():
        assert key not in Path(written.location).read_text()


def test_nothing_is_anchored_before_the_first_event_or_without_a_store(db, audit_anchor_dir, settings):
    assert anchor_write() == []
    record()
    settings.AUDIT_ANCHOR_DIR = ""
    assert configured_stores() == [] and anchor_write() == []
    with pytest.raises(CommandError, match="CKPTFLEET_AUDIT_ANCHOR_DIR"):
        call_command("anchor_audit")


def test_the_chain_verifies_against_its_anchors(db, audit_anchor_dir, capsys):
    for i in range(3):
        record(f"a.{i}")
        anchor_write()
    record("a.3")
    call_command("verify_audit")
    assert "4 events, 3 anchors checked" in capsys.readouterr().out
    check = AuditVerification.objects.get()
    assert (check.ok, check.events_checked, check.anchors_checked, check.trigger) == (True, 4, 3, "command")


def test_events_removed_from_the_end_are_named_by_the_anchor_beyond_them(db, audit_anchor_dir):
    events = [record(f"a.{i}") for i in range(5)]
    anchor_write()
    # The intruder deletes the last two events and sets the head back, triggers out of the way.
    tamper("DELETE FROM catalog_auditevent WHERE id IN (%s, %s)", [events[3].pk, events[4].pk])
    tamper("UPDATE catalog_auditchainhead SET count = 3, last_hash = %s WHERE id = 1", [events[2].hash])
    report = audit_verify_all()
    assert report.events_checked == 3 and not report.ok
    [problem] = report.problems
    assert problem.startswith("anchor of ")
    assert f"says event 5 has hash {events[4].hash[:12]}…, the database has only 3 events" in problem


def test_a_stretch_rehashed_with_the_key_is_found_by_an_anchor_written_before(db, audit_anchor_dir):
    for i in range(4):
        record(f"a.{i}")
    anchor_write()
    anchored = AuditChainHead.objects.get(pk=1).last_hash
    record("a.4")
    rehash_from(2)
    report = audit_verify_all()
    # The chain itself is consistent again: only the anchor tells.
    assert report.events_checked == 5
    [problem] = report.problems
    assert f"says event 4 has hash {anchored[:12]}…, the database has " in problem
    assert "events up to it were rewritten" in problem
    with pytest.raises(CommandError, match="says event 4 has hash"):
        call_command("verify_audit")


def test_a_forged_or_altered_anchor_line_is_refused(db, audit_anchor_dir):
    events = [record(f"a.{i}") for i in range(2)]
    anchor_write()
    [path] = audit_anchor_dir.glob("*.jsonl")
    line = json.loads(path.read_text())
    line["count"], line["last_hash"] = 1, events[0].hash  # moved back, signature kept
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    report = audit_verify_all()
    assert any("signature that does not match its content" in p for p in report.problems), report.problems


def test_an_anchor_line_cut_from_the_file_is_missed(db, audit_anchor_dir):
    record("a.0")
    anchor_write()
    record("a.1")
    anchor_write()
    [path] = audit_anchor_dir.glob("*.jsonl")
    path.write_text(path.read_text().splitlines()[0] + "\n")
    report = audit_verify_all()
    [problem] = report.problems
    assert "for event 2 " in problem and f"is no longer in {path}" in problem


def test_a_store_that_fails_is_recorded_and_the_others_still_get_the_anchor(db, audit_anchor_dir, tmp_path):
    record()
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the directory should be")
    written = anchor_write(stores=[FileAnchorStore(blocked), FileAnchorStore(audit_anchor_dir)])
    assert [a.outcome for a in written] == [AnchorOutcome.FAILED, AnchorOutcome.WRITTEN]
    assert "Error" in written[0].error


def test_beat_anchors_and_verifies_on_the_configured_schedule(db, audit_anchor_dir, settings):
    schedule = celery_app.conf.beat_schedule
    assert schedule["anchor-audit-chain"] == {
        "task": "audit.tasks.anchor_audit_chain",
        "schedule": 60.0 * settings.AUDIT_ANCHOR_MINUTES,
    }
    assert schedule["verify-audit-chain"]["task"] == "audit.tasks.verify_audit_scheduled"
    record()
    [anchor_id] = anchor_audit_chain.delay().get()
    assert AuditAnchor.objects.get(pk=anchor_id).outcome == "written"
    result = verify_audit_scheduled.delay().get()
    check = AuditVerification.objects.get(pk=result["verification"])
    assert (check.ok, check.trigger, check.events_checked, check.anchors_checked) == (True, "schedule", 1, 1)


def test_anchors_signed_with_a_rotated_key_still_verify(db, audit_anchor_dir, settings):
    record()
    anchor_write()
    old = dict(settings.AUDIT_KEYS)
    settings.AUDIT_KEY_ID, settings.AUDIT_KEYS = "newkey", {**old, "newkey": "n" * 40}
    record()
    anchor_write()
    assert audit_verify_all().ok
    settings.AUDIT_KEYS = {"newkey": "n" * 40}
    [path] = audit_anchor_dir.glob("*.jsonl")
    first = path.read_text().splitlines()[0]
    with pytest.raises(Exception, match="neither the current key nor in the keyring"):
        read_anchor(first, "line 1")


# --- Object Lock COMPLIANCE on a real S3 endpoint ------------------------------------------------------------------


@pytest.fixture
def lock_bucket(s3):
    return s3.bucket(object_lock=True)


def s3_store(s3, bucket: str, **kwargs) -> S3AnchorStore:
    return S3AnchorStore(
        f"s3://{bucket}/audit/", endpoint_url=s3.url, region_name="us-east-1", addressing_style="path", **kwargs
    )


def test_an_s3_anchor_is_a_compliance_locked_object_nobody_can_delete(db, s3, lock_bucket):
    events = [record(f"a.{i}") for i in range(2)]
    [written] = anchor_write(stores=[s3_store(s3, lock_bucket, retain_days=30)])
    assert (written.target, written.outcome) == (AnchorTarget.S3, AnchorOutcome.WRITTEN), written.error
    key, _, version = written.location.removeprefix(f"s3://{lock_bucket}/").partition("?versionId=")
    assert key.startswith("audit/") and key.endswith("-000000000002.json")
    head = s3.client.head_object(Bucket=lock_bucket, Key=key, VersionId=version)
    assert head["ObjectLockMode"] == "COMPLIANCE"
    assert head["ObjectLockRetainUntilDate"] >= written.at + timedelta(days=30) - timedelta(seconds=1)
    assert written.retain_until == written.at + timedelta(days=30)
    body = json.loads(s3.client.get_object(Bucket=lock_bucket, Key=key)["Body"].read())
    assert (body["count"], body["last_hash"]) == (2, events[-1].hash)
    # COMPLIANCE: the version cannot be deleted with any credentials. (S3 also refuses to shorten the retention;
    # moto's server does not enforce that, so it is not asserted here.)
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.client.delete_object(Bucket=lock_bucket, Key=key, VersionId=version)


def test_the_verifier_reads_the_s3_anchors_and_catches_a_rewrite_behind_them(db, s3, lock_bucket, settings):
    settings.AUDIT_ANCHOR_S3 = f"s3://{lock_bucket}/audit/"
    settings.AUDIT_ANCHOR_S3_ENDPOINT = s3.url
    settings.AUDIT_ANCHOR_S3_REGION = "us-east-1"
    settings.AUDIT_ANCHOR_S3_ADDRESSING = "path"
    [store] = configured_stores()
    assert isinstance(store, S3AnchorStore)
    for i in range(3):
        record(f"a.{i}")
    anchor_audit_chain.delay().get()
    record("a.3")
    anchor_audit_chain.delay().get()
    report = audit_verify_all()
    assert (report.ok, report.events_checked, report.anchors_checked) == (True, 4, 2), report.problems
    rehash_from(1)
    report = audit_verify_all()
    assert len(report.problems) == 2
    assert all("events up to it were rewritten" in p for p in report.problems)


def test_a_bucket_without_object_lock_gets_no_anchor_and_says_why(db, s3):
    record()
    plain = s3.bucket(versioned=True)
    [written] = anchor_write(stores=[s3_store(s3, plain)])
    assert written.outcome == AnchorOutcome.FAILED
    assert "PutObject (COMPLIANCE" in written.error and plain in written.error


def test_a_real_worker_anchors_and_verifies_and_the_page_shows_it(audit_anchor_dir, celery_worker_process, signed_in):
    from tests.conftest import wait_for

    for i in range(3):
        record(f"a.{i}")
    celery_app.send_task("audit.tasks.anchor_audit_chain")
    wait_for(lambda: AuditAnchor.objects.exists(), timeout=60, what="the worker's anchor")
    assert AuditAnchor.objects.get().outcome == "written"
    assert anchor_lines(audit_anchor_dir)[0]["count"] == 3  # written by the worker process, into this test's directory
    celery_app.send_task("audit.tasks.verify_audit_scheduled")
    wait_for(lambda: AuditVerification.objects.exists(), timeout=60, what="the worker's verification")
    check = AuditVerification.objects.get()
    assert (check.ok, check.events_checked, check.anchors_checked) == (True, 3, 1)
    page = signed_in.get("/audit/").content.decode()
    assert "Intact</span> Last verified" in page and "3 events checked against 1 anchor" in page
    assert "Anchored</span> Last anchor" in page


def test_the_demo_anchors_its_trail_in_a_signed_file_and_verifies_it(
    db, tmp_path, settings, audit_anchor_dir, signed_in
):
    import io

    settings.VAR_DIR = tmp_path
    out = io.StringIO()
    call_command("seed_demo", dir=str(tmp_path / "demo"), stdout=out)
    said = out.getvalue()
    assert "audit anchor: event " in said and "audit verification: intact" in said
    anchor = AuditAnchor.objects.get()
    assert anchor.outcome == "written" and anchor.location.startswith(str(audit_anchor_dir))
    assert anchor_lines(audit_anchor_dir)[0]["count"] == anchor.count > 0
    page = signed_in.get("/audit/").content.decode()
    assert "Anchored</span> Last anchor" in page and "Intact</span> Last verified" in page
