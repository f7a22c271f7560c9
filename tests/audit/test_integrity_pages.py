"""Where people and monitoring see the audit trail's integrity: the audit page (last verification, last anchor, a
red banner when verification failed), /healthz/ and /metrics."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from audit.anchors import anchor_write
from audit.choices import AnchorOutcome, AnchorTarget, VerificationTrigger
from audit.models import AuditAnchor, AuditVerification
from audit.verify import verify_and_record
from tests.conftest import queries_for
from tests.helpers.audit import record, tamper


def test_the_page_shows_the_last_verification_and_anchor_with_their_age(db, signed_in, audit_anchor_dir):
    for i in range(3):
        record(f"a.{i}")
    page = signed_in.get("/audit/").content.decode()
    assert "Not verified yet. Beat verifies the chain every 60 minutes." in page
    assert "No anchor written yet" in page and str(audit_anchor_dir) in page
    anchor_write()
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    page = signed_in.get("/audit/").content.decode()
    assert "Intact</span> Last verified" in page and "(schedule)" in page
    assert "3 events checked against 1 anchor" in page
    assert "Anchored</span> Last anchor" in page and "event 3 (hash" in page and "signed file" in page
    assert "just now" in page or "seconds ago" in page or "minute ago" in page
    assert "The audit trail failed verification" not in page and "Overdue" not in page


def test_a_failed_verification_puts_a_red_banner_on_top_with_the_first_problem(db, signed_in):
    events = [record(f"a.{i}") for i in range(3)]
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[1].pk])
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    page = signed_in.get("/audit/").content.decode()
    banner = page.split('id="audit-verification-failed"', 1)[1].split("</div>", 1)[0]
    assert "The audit trail failed verification" in banner
    assert f"the chain is broken at event {events[1].pk}" in banner
    assert 'class="callout callout--bad" role="alert"' in page
    assert "Broken</span>" in page


def test_overdue_runs_and_a_failed_anchor_are_said(db, signed_in, audit_anchor_dir):
    record()
    long_ago = timezone.now() - timedelta(days=2)
    AuditVerification.objects.create(
        started_at=long_ago, finished_at=long_ago, trigger="schedule", ok=True, events_checked=1, anchors_checked=0
    )
    AuditAnchor.objects.create(
        at=long_ago, target=AnchorTarget.FILE, location="/x/a.jsonl", count=1, last_hash="a" * 64, outcome="written"
    )
    AuditAnchor.objects.create(
        at=timezone.now(),
        target=AnchorTarget.S3,
        location="s3://anchors/audit/",
        count=1,
        last_hash="a" * 64,
        outcome=AnchorOutcome.FAILED,
        error="S3Error: PutObject of s3://anchors/audit/x: AccessDenied",
    )
    page = signed_in.get("/audit/").content.decode()
    assert page.count("Overdue</span>") == 2
    assert "Failed</span> The newest anchor attempt" in page and "AccessDenied" in page


def test_no_anchor_store_is_a_warning_on_the_page(db, signed_in):
    record()
    assert "Not configured</span>" in signed_in.get("/audit/").content.decode()


def test_the_page_costs_the_same_queries_with_anchors_and_verifications(db, signed_in, audit_anchor_dir):
    record()
    anchor_write()
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    one = queries_for(signed_in, "/audit/")
    for _ in range(20):
        record()
        anchor_write()
        verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    assert queries_for(signed_in, "/audit/") == one


def test_health_answers_with_the_last_verification_and_anchor(client, db, audit_anchor_dir):
    record()
    anchor_write()
    check = verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    answer = client.get("/healthz/").json()
    assert answer["status"] == "ok"
    assert answer["audit"]["verified_ok"] is True
    assert answer["audit"]["events_checked"] == 1 and answer["audit"]["anchors_checked"] == 1
    assert answer["audit"]["verified_at"] == check.finished_at.isoformat()
    assert answer["audit"]["last_anchor_at"] == AuditAnchor.objects.get().at.isoformat()


def test_a_failed_verification_leaves_health_200_but_says_so(client, db):
    events = [record(f"a.{i}") for i in range(2)]
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[0].pk])
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    response = client.get("/healthz/")
    assert response.status_code == 200  # a load balancer must not pull the app for it: people must look
    assert response.json()["audit"]["verified_ok"] is False
    assert "chain" not in response.content.decode()  # no login here: the words are on the audit page


def metrics_of(response) -> dict[str, float]:
    samples = {}
    for line in response.content.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.split(" ")
            samples[name] = float(value)
    return samples


def test_metrics_are_prometheus_text_with_the_audit_gauges(client, db, audit_anchor_dir):
    empty = client.get("/metrics")
    assert empty.status_code == 200
    assert empty["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert metrics_of(empty) == {"ckptfleet_audit_events": 0.0}  # nothing verified or anchored yet: no sample
    for i in range(3):
        record(f"a.{i}")
    [anchor] = anchor_write()
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    response = client.get("/metrics")
    text = response.content.decode()
    assert "# TYPE ckptfleet_audit_verify_ok gauge" in text and "# HELP ckptfleet_audit_events " in text
    samples = metrics_of(response)
    assert samples["ckptfleet_audit_verify_ok"] == 1
    assert samples["ckptfleet_audit_events"] == 3
    assert samples["ckptfleet_audit_last_anchor_timestamp_seconds"] == anchor.at.timestamp()
    events = list(record(f"b.{i}") for i in range(2))
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[0].pk])
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    assert metrics_of(client.get("/metrics"))["ckptfleet_audit_verify_ok"] == 0


def test_metrics_want_the_token_when_one_is_set(client, db, settings):
    settings.METRICS_TOKEN = "scrape-token-" + "x" * 20
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get("/metrics", headers={"Authorization": f"Bearer {settings.METRICS_TOKEN}"})
    assert ok.status_code == 200 and "ckptfleet_audit_events" in ok.content.decode()
    assert client.post("/metrics").status_code == 405
