"""Fast checks of the pieces with no store behind them: tier order, the Restore header, beat's choice of jobs."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from fleet import s3
from fleet.choices import Tier
from promotion import runner
from promotion.choices import JobState
from promotion.models import PromotionJob
from promotion.services import tier_rank


def test_tiers_rank_hottest_first_and_unknown_ones_coldest():
    ranks = [tier_rank(t) for t in (Tier.NVME, Tier.OBJECT_STANDARD, Tier.OBJECT_INFREQUENT, Tier.DEEP_ARCHIVE)]
    assert ranks == sorted(ranks)
    assert tier_rank("unknown") > tier_rank(Tier.DEEP_ARCHIVE)


@pytest.mark.parametrize(
    ("header", "restore", "expiry"),
    [
        (None, None, ""),
        ('ongoing-request="true"', "ongoing", ""),
        (
            'ongoing-request="false", expiry-date="Fri, 21 Dec 2026 00:00:00 GMT"',
            "available",
            "Fri, 21 Dec 2026 00:00:00 GMT",
        ),
    ],
)
def test_the_restore_header_says_ongoing_or_available(header, restore, expiry):
    client = mock.Mock()
    client.head_object.return_value = {
        "ContentLength": 5,
        "ETag": '"e"',
        "StorageClass": "GLACIER",
        **({"Restore": header} if header else {}),
    }

    state = s3.object_state(client, "b", "k")

    assert (state.restore, state.restore_expiry, state.storage_class, state.etag) == (restore, expiry, "GLACIER", "e")


def test_a_restore_already_under_way_is_not_an_error():
    from botocore.exceptions import ClientError

    client = mock.Mock()
    client.restore_object.side_effect = ClientError(
        {"Error": {"Code": "RestoreAlreadyInProgress", "Message": "busy"}}, "RestoreObject"
    )
    assert s3.restore_request(client, "b", "k", days=1) == "ongoing"
    client.restore_object.side_effect = None
    client.restore_object.return_value = {"ResponseMetadata": {"HTTPStatusCode": 200}}
    assert s3.restore_request(client, "b", "k", days=1) == "available"


def test_a_failed_part_aborts_the_multipart_copy():
    from botocore.exceptions import ClientError

    client = mock.Mock()
    client.create_multipart_upload.return_value = {"UploadId": "u1"}
    client.upload_part_copy.side_effect = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "X")

    with pytest.raises(s3.S3Error) as failed:
        s3.copy_object(
            client,
            source_bucket="a",
            source_key="k",
            target_bucket="b",
            target_key="k",
            size=100,
            storage_class="STANDARD",
            threshold=10,
            part_size=50,
        )

    assert failed.value.code == "AccessDenied" and not failed.value.transient
    client.abort_multipart_upload.assert_called_once_with(Bucket="b", Key="k", UploadId="u1")


@pytest.mark.django_db
def test_beat_picks_due_restores_and_lost_jobs_only(kit):
    _, copy = kit.checkpoint(500, {"a": (b"a", "GLACIER")})
    now = timezone.now()
    long_ago = now - timedelta(hours=1)

    def job(state, **kwargs):
        target = kit.bucket()
        return PromotionJob.objects.create(
            checkpoint=copy.checkpoint,
            source_copy=copy,
            target_location=target.location,
            target_tier="x",
            method="restore",
            state=state,
            reason="r",
            requested_label="t",
            requested_at=kwargs.pop("at", now),
            **kwargs,
        )

    due = job(JobState.RESTORING, next_poll_at=long_ago)
    job(JobState.RESTORING, next_poll_at=now + timedelta(minutes=5))
    lost_request = job(JobState.REQUESTED, at=long_ago)
    job(JobState.REQUESTED)
    lost_copy = job(JobState.COPYING, heartbeat_at=long_ago)
    job(JobState.COPYING, heartbeat_at=now)
    job(JobState.COMPLETED, at=long_ago)

    assert runner.due_jobs(now) == {"poll": [due.pk], "start": [lost_request.pk], "copy": [lost_copy.pk]}


@pytest.mark.django_db
def test_one_delivery_at_a_time_works_on_a_copying_job_and_a_stale_one_is_taken_over(kit):
    _, copy = kit.checkpoint(520, {"a": (b"a", "STANDARD")})
    job = PromotionJob.objects.create(
        checkpoint=copy.checkpoint,
        source_copy=copy,
        target_location=kit.bucket().location,
        target_tier="x",
        method="copy",
        state=JobState.COPYING,
        reason="r",
        requested_label="t",
        requested_at=timezone.now(),
    )

    assert runner._claim(job.pk, "first")
    assert not runner._claim(job.pk, "second")  # the first holds a fresh lease
    assert runner._claim(job.pk, "first")  # a retry of the same delivery carries on
    PromotionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert runner._claim(job.pk, "second")  # the first went silent: its lease ran out
    assert runner.copy(job.pk, claim="first") == "skipped"
