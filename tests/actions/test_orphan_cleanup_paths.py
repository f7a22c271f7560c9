"""The ways in to an orphan clean-up (the orphans page, the API, the management command) call one service: the same
preview, the same refusals, one audit event, and a deletion page that shows a job with no checkpoint."""

from __future__ import annotations

import html
import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from actions.models import DeletionItem, DeletionJob, DeletionState
from audit.models import AuditEvent
from catalog.models import ShardFile
from fleet.models import Bucket, MultipartUpload
from tests.catalog.test_orphans import bucket_location, files, host_location

pytestmark = pytest.mark.django_db

GROUP = {"kind": "unclaimed", "prefix": "scratch"}


@pytest.fixture
def strays():
    """Two stray files in scratch/ on a host; an incomplete upload in a bucket with a prefix."""
    nvme = host_location()
    files(nvme, {"scratch/dump-1.bin": 1000, "scratch/dump-2.bin": 3000, "llm/llama-7b/notes.txt": 10})
    bucket = bucket_location()
    Bucket.objects.create(location=bucket, bucket_name="ckpt-west", prefix="fleet/")
    MultipartUpload.objects.create(
        location=bucket,
        key="fleet/llm/llama-7b/step-5/__0_0.distcp",
        upload_id="up-1",
        bytes=5 << 20,
        parts=1,
        first_seen_at=timezone.now(),
    )
    return nvme, bucket


def written() -> int:
    return AuditEvent.objects.exclude(action="access.refused").count()


def test_an_operator_previews_then_schedules_from_the_orphans_page(strays, signed_in_as):
    nvme, _ = strays
    client = signed_in_as("operator")
    page = client.get(reverse("catalog:orphans")).content.decode()
    assert "Clean up</a>" in page
    preview = client.get(reverse("actions:orphan-cleanup"), {**GROUP, "location": nvme.pk}).content.decode()
    assert "scratch/dump-1.bin" in preview and "scratch/dump-2.bin" in preview
    assert "3.9 KiB" in preview and "Schedule clean-up</button>" in preview
    answer = client.post(
        reverse("actions:orphan-cleanup"), {**GROUP, "location": nvme.pk, "reason": "crash dumps"}, follow=True
    )
    job = DeletionJob.objects.get()
    assert answer.redirect_chain[-1][0] == reverse("actions:deletion-detail", args=[job.pk])
    detail = answer.content.decode()
    assert "orphan clean-up" in detail and "scratch/dump-2.bin" in detail
    assert (job.scope, job.checkpoint_id, job.state, job.items_total) == ("orphans", None, "awaiting_approval", 2)
    event = AuditEvent.objects.get(action="deletion.schedule")
    assert (event.target_type, event.target_id, event.after["scope"], event.source) == (
        "location",
        nvme.pk,
        "orphans",
        "ui",
    )
    assert "scratch/" in client.get(reverse("actions:deletion-list")).content.decode()
    assert "Clean up files of no checkpoint at" in client.get(reverse("jobs:list")).content.decode()


def test_a_viewer_sees_no_clean_up_and_is_refused_changing_nothing(strays, signed_in_as):
    nvme, _ = strays
    client = signed_in_as("viewer")
    assert "Clean up</a>" not in client.get(reverse("catalog:orphans")).content.decode()
    n = written()
    answer = client.post(
        reverse("actions:orphan-cleanup"), {**GROUP, "location": nvme.pk, "reason": "tidy"}, follow=True
    )
    assert "operator role" in answer.content.decode()
    api = client.post(
        "/api/v1/orphans/cleanup/", {**GROUP, "location": nvme.pk, "reason": "tidy"}, content_type="application/json"
    )
    assert api.status_code == 403 and "operator role" in api.json()["detail"]
    assert not DeletionJob.objects.exists() and written() == n


def test_the_api_previews_and_schedules_and_refuses_an_unknown_group(strays, signed_in_as):
    nvme, bucket = strays
    client = signed_in_as("operator")
    preview = client.post(
        "/api/v1/orphans/cleanup/preview/",
        {"kind": "multipart", "location": bucket.pk, "prefix": "llm/llama-7b"},
        content_type="application/json",
    ).json()
    assert (preview["uploads"], preview["bytes"], preview["allowed"]) == (1, 5 << 20, True)
    assert preview["sample"][0]["upload_id"] == "up-1"
    n = written()
    for bad in (
        {"kind": "unclaimed", "location": nvme.pk, "prefix": "nowhere"},
        {"kind": "rubbish", "location": nvme.pk},
        {"kind": "unclaimed", "location": 99999},
        {"kind": "multipart", "location": nvme.pk, "prefix": "scratch"},
    ):
        answer = client.post("/api/v1/orphans/cleanup/", {**bad, "reason": "tidy"}, content_type="application/json")
        assert answer.status_code in (400, 404), answer.content
        assert answer.json()["detail"]
    assert not DeletionJob.objects.exists() and written() == n
    made = client.post(
        "/api/v1/orphans/cleanup/",
        {"kind": "multipart", "location": bucket.pk, "prefix": "llm/llama-7b", "reason": "abandoned"},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["scope"], body["checkpoint"], body["orphan_kind"]) == ("orphans", None, "multipart")
    items = client.get(f"/api/v1/actions/deletions/{body['id']}/items/").json()["results"]
    assert [(i["kind"], i["path"], i["upload_id"]) for i in items] == [
        ("upload", "fleet/llm/llama-7b/step-5/__0_0.distcp", "up-1")
    ]


def test_the_command_previews_and_schedules_as_a_named_person(strays, signed_in_as, capsys):
    nvme, _ = strays
    olga = signed_in_as("operator", username="olga").user
    call_command("orphan_cleanup", "preview", "--kind", "unclaimed", "--location", str(nvme.pk), "--prefix", "scratch")
    out = capsys.readouterr().out
    assert "2 files" in out and "scratch/dump-1.bin" in out
    with pytest.raises(CommandError, match="--as USERNAME"):
        call_command("orphan_cleanup", "schedule", "--kind", "unclaimed", "--location", str(nvme.pk), "--reason", "x")
    call_command(
        "orphan_cleanup",
        "schedule",
        "--as",
        olga.username,
        "--kind",
        "unclaimed",
        "--location",
        str(nvme.pk),
        "--prefix",
        "scratch",
        "--reason",
        "crash dumps",
    )
    job = DeletionJob.objects.get()
    assert "olga" in job.requested_label and job.state == DeletionState.AWAITING_APPROVAL
    assert AuditEvent.objects.get(action="deletion.schedule").source == "command"


def test_the_orphans_page_and_the_bucket_list_show_the_lifecycle_rule(strays, signed_in_as):
    _, bucket = strays
    client = signed_in_as("viewer")
    page = client.get(reverse("catalog:orphans")).content.decode()
    assert "AbortIncompleteMultipartUpload" in page and "DaysAfterInitiation" in page
    start = page.index("{", page.index(f'id="lifecycle-rule-{bucket.pk}"'))
    end = page.index("</code></pre>", start)
    rule = json.loads(html.unescape(page[start:end]))
    assert rule["Rules"][0]["Filter"] == {"Prefix": "fleet/"}
    assert rule["Rules"][0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert "put-bucket-lifecycle-configuration --bucket ckpt-west" in page
    assert "lifecycle configuration could not be read" in page  # never scanned: not known
    Bucket.objects.filter(pk=bucket.pk).update(abort_uploads_days=0)
    assert (
        "nothing aborts incomplete uploads below this prefix" in client.get(reverse("catalog:orphans")).content.decode()
    )
    fleet = client.get("/fleet/").content.decode()
    assert f"location={bucket.pk}#lifecycle-rule-{bucket.pk}" in fleet


def test_an_orphan_job_shows_in_the_approvals_inbox_and_deletion_list(strays, signed_in_as):
    nvme, _ = strays
    operator = signed_in_as("operator")
    operator.post(reverse("actions:orphan-cleanup"), {**GROUP, "location": nvme.pk, "reason": "crash dumps"})
    job = DeletionJob.objects.get()
    assert job.state == DeletionState.AWAITING_APPROVAL
    approver = signed_in_as("approver")
    inbox = approver.get(reverse("approvals:inbox")).content.decode()
    assert f"Deletion {job.pk}" in inbox and "orphans" in inbox and "scratch/" in inbox
    assert "orphans" in approver.get(reverse("actions:deletion-list")).content.decode()
    approver.post(reverse("actions:approve", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED
    assert AuditEvent.objects.filter(action="deletion.approve", target_type="location", target_id=nvme.pk).exists()
    assert DeletionItem.objects.filter(job=job).count() == 2
    assert ShardFile.objects.filter(location=nvme, gone_at__isnull=True).count() == 3  # nothing deleted yet
