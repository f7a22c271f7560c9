"""Which conditional delete a bucket's store honours (issue 26, item 4): probed, stated by an admin, shown on the
bucket page, and obeyed by the executor. Against moto's S3 server, which honours DeleteObject's If-Match only."""

from __future__ import annotations

from collections import Counter
from io import StringIO

import pytest
from botocore.exceptions import ConnectTimeoutError
from django.core.management import call_command
from django.core.management.base import CommandError

from actions import services
from actions.models import DeletionItem, DeletionState, ItemState
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from ckptfleet.errors import PermissionRefused
from fleet import s3 as fleet_s3
from fleet.choices import DeleteCondition
from fleet.models import Bucket
from fleet.services import bucket_set_delete_condition
from tests.actions.test_execution import run_due, versions
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db


@pytest.fixture
def unversioned(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    return name, bucket


def test_the_command_probes_the_store_and_the_bucket_page_says_what_it_found(s3, unversioned, client, adam):
    name, bucket = unversioned
    before = versions(s3, name)
    out = StringIO()
    call_command("bucket_delete_condition", str(bucket.location_id), "--probe", stdout=out)
    assert "in force: single" in out.getvalue()
    assert versions(s3, name) == before  # the probe object is gone, every version of it
    bucket.refresh_from_db()
    assert bucket.delete_condition == DeleteCondition.SINGLE and bucket.delete_condition_probed_at is not None
    [event] = AuditEvent.objects.filter(action="bucket.delete_condition", target_id=bucket.location_id)
    assert event.after == {"delete_condition": "single", "in_force": "single"}

    client.force_login(adam)
    page = client.get(f"/fleet/locations/{bucket.location_id}/").content.decode()
    assert "Conditional deletes" in page and "honoured by DeleteObject (If-Match) only" in page


def test_only_an_admin_states_the_condition_and_a_refusal_changes_nothing(unversioned, olga, adam):
    _name, bucket = unversioned
    events = AuditEvent.objects.count()
    with pytest.raises(PermissionRefused):
        bucket_set_delete_condition(
            location=bucket.location, setting="batch", reason="trust me", actor=Actor.person(olga, EventSource.UI)
        )
    assert Bucket.objects.get(pk=bucket.pk).delete_condition_setting == ""
    assert AuditEvent.objects.count() == events
    with pytest.raises(CommandError, match="admin"):
        call_command("bucket_delete_condition", str(bucket.location_id), "--set", "none")

    out = StringIO()
    call_command(
        "bucket_delete_condition",
        str(bucket.location_id),
        "--set",
        "none",
        "--as",
        "adam",
        "--reason",
        "vendor",
        stdout=out,
    )
    assert "in force: none" in out.getvalue()
    [event] = AuditEvent.objects.filter(action="bucket.delete_condition", target_id=bucket.location_id)
    assert event.actor_label == "adam" and event.reason == "vendor"
    assert event.after == {"setting": "none", "in_force": "none"}


def test_soft_delete_still_works_where_no_condition_is_honoured(
    s3, unversioned, settings, adam, django_capture_on_commit_callbacks
):
    """The trash copy is compared again before the delete: a store honouring no condition keeps its soft delete."""
    settings.SOFT_DELETE_DAYS = 7
    _name, bucket = unversioned
    bucket_set_delete_condition(
        location=bucket.location, setting="none", reason="vendor", actor=Actor.person(adam, EventSource.UI)
    )
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and job.outcome.startswith("3 of 3 moved to the trash"), job.outcome
    assert Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.TRASHED: 3}


def test_a_single_delete_that_fails_for_now_is_asked_again_not_blocked():
    class Client:
        def delete_object(self, **kwargs):
            if kwargs["Key"] == "slow":
                raise ConnectTimeoutError(endpoint_url="http://store")
            assert kwargs["IfMatch"] == '"abc"'

    slow, done = fleet_s3.delete_if_match(Client(), "b", [("slow", "abc"), ("fine", "abc")], batch=False)
    assert fleet_s3.is_transient_code(slow.code) and not slow.deleted
    assert done.deleted
