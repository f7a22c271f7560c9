"""An operator cleans up an abandoned multipart upload in Chromium: the orphans page, the preview, the reason, the
deletion page; then the executor aborts the upload in the real bucket. A viewer is offered no Clean up."""

from __future__ import annotations

import pytest

from actions import execution
from actions.models import DeletionJob, DeletionState
from fleet.models import MultipartUpload
from tests.helpers.deletion import make_due

pytestmark = pytest.mark.django_db(transaction=True)


def sign_in(page, client, live_server) -> None:
    page.context.clear_cookies()
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )


def test_an_operator_cleans_up_an_incomplete_upload_from_the_orphans_page(
    live_server,
    browser_page,
    s3,
    orphaned,
    signed_in_as,
    django_capture_on_commit_callbacks,
):
    name, bucket, upload_id = orphaned
    page = browser_page
    sign_in(page, signed_in_as("viewer"), live_server)
    page.goto(f"{live_server.url}/orphans/")
    assert page.get_by_role("heading", name="Orphans").is_visible()
    assert page.get_by_role("link", name="Clean up").count() == 0  # a viewer is offered none

    sign_in(page, signed_in_as("operator"), live_server)
    page.goto(f"{live_server.url}/orphans/")
    assert page.locator(f"#lifecycle-rule-{bucket.location_id}").get_by_text("DaysAfterInitiation").is_visible()
    page.get_by_role("link", name=f"Clean up incomplete multipart uploads at {bucket.location.name} in scratch").click()
    page.wait_for_url("**/actions/orphans/cleanup/**")  # the preview page, not the list it was clicked on
    page.locator("#cleanup-stats").wait_for()
    assert page.locator("#cleanup-stats").get_by_text("1 upload").is_visible()
    assert page.locator("#cleanup-sample").get_by_text("fleet/scratch/big.bin").is_visible()
    page.get_by_label("Reason").fill("an upload the crashed job never finished")
    page.get_by_role("button", name="Schedule clean-up").click()
    page.wait_for_selector("text=frozen, to go no sooner than")
    job = DeletionJob.objects.get()
    assert (job.scope, job.orphan_kind, job.items_total) == ("orphans", "multipart", 1)
    assert page.get_by_text("orphan clean-up: incomplete multipart uploads").is_visible()

    make_due(job)
    with django_capture_on_commit_callbacks(execute=True):
        execution.start_due()
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert s3.client.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    assert MultipartUpload.objects.get(upload_id=upload_id).gone_at is not None
    page.reload()
    assert page.get_by_text("multipart upload aborted").is_visible()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/orphans/")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert not page.console_errors, page.console_errors
