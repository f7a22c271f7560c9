"""The checksum phase of a bucket scan as tasks: chunks of up to 2,000 objects that any worker takes.

After a scan's snapshot is applied, the objects it added or changed are HEADed for their stored
checksums in chunks (``HeadChunk``), one Celery task each: retried with backoff while the store
throttles or fails with 5xx, never for a refusal, and written conditional on the ETag listed. Here
against moto's server, through the failing proxy of ``test_scan_faults`` where a fault is wanted,
in-process (the embedded default) and through a real worker on Redis and PostgreSQL.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import botocore.retries.standard
import pytest
from django.utils import timezone

import fleet.s3 as s3lib
from audit.actor import Actor
from catalog.models import CheckpointCopy, ShardFile
from ckptfleet.celery import app as celery_app
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import HeadChunk, HeadChunkState, Inventory
from ingest.scan import SCANNER, head_chunk_run, head_chunks_resend, scan_run, scan_start
from ingest.scan import head_chunks as scan_head_chunks
from ingest.scan import head_plan as scan_head_plan
from ingest.scan import scanner as scan_scanner
from tests.conftest import wait_for
from tests.helpers.faults import FaultyEndpoint
from tests.helpers.trees import tree_files

pytestmark = [pytest.mark.services]

SHARD = "llm/llama-tiny/step-100/__0_0.distcp"


def head_of(path: str):
    return lambda method, url_path, query: method == "HEAD" and url_path.endswith("/" + path)


@pytest.fixture
def faulty(s3, monkeypatch):
    """A failing endpoint in front of the test server; one attempt per request, so a fault fails a chunk."""
    monkeypatch.setattr(s3lib, "MAX_ATTEMPTS", 1)
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    endpoint = FaultyEndpoint(s3.url)
    yield endpoint
    endpoint.close()


@pytest.fixture
def backoffs(monkeypatch) -> list[int]:
    """The retries each chunk retry was scheduled for (in-process the countdown itself is not waited)."""
    seen: list[int] = []
    original = scan_head_chunks.head_backoff

    def record(retries: int) -> float:
        seen.append(retries)
        return original(retries)

    monkeypatch.setattr(scan_head_chunks, "head_backoff", record)
    return seen


def checksums_of(location) -> dict[str, str]:
    return dict(ShardFile.objects.filter(location=location).values_list("path", "checksum"))


def sha256s(tree: str) -> dict[str, str]:
    return {path: hashlib.sha256(body).hexdigest() for path, body in tree_files(tree).items()}


# --- chunks ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_objects_a_scan_added_are_planned_in_chunks_of_2000(s3, scan_now):
    # 4,001 new objects at once would be slow to put into moto; the planning is tried on rows instead.
    assert scan_head_plan.HEAD_CHUNK == 2000
    name = s3.bucket()
    s3.put(name, "team/run/model.ckpt", b"x")
    bucket = s3.register(name, fetch_checksums=False)
    inventory = scan_now(bucket)
    now = timezone.now()
    ShardFile.objects.bulk_create(
        ShardFile(
            location=bucket.location,
            path=f"team/run/step-1/__{i}_0.distcp",
            size=10,
            mtime=now,
            etag=f"etag-{i}",
            first_seen_at=now,
            changed_at=now,
            changed_by=inventory,
        )
        for i in range(4001)
    )
    bucket.fetch_checksums = True

    scan_head_plan.plan_heads(inventory, bucket, head_all=False, versioned=False, recheck=False, write_lock_state=True)

    chunks = list(HeadChunk.objects.filter(inventory=inventory).order_by("seq"))
    assert [c.size for c in chunks] == [2000, 2000, 2]  # the object the scan itself added, and the 4,001
    assert all(len(c.items) == c.size and c.state == HeadChunkState.PENDING for c in chunks)
    keys = [path for c in chunks for path, _etag in c.items]
    assert keys == sorted(keys) and len(set(keys)) == 4002
    assert dict(chunks[0].items)["team/run/step-1/__0_0.distcp"] == "etag-0"
    inventory.refresh_from_db()
    assert (inventory.checksums_total, inventory.checksums_done, inventory.checksums_finished_at) == (4002, 0, None)
    assert inventory.checksums_running


@pytest.mark.django_db
def test_a_scans_chunks_run_in_process_and_the_scan_says_when_they_finished(s3, scan_now, monkeypatch):
    monkeypatch.setattr(scan_head_plan, "HEAD_CHUNK", 4)
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    chunks = list(HeadChunk.objects.filter(inventory=inventory).order_by("seq"))
    assert [(c.size, c.state, c.attempts, c.failed) for c in chunks] == [
        (4, "done", 1, 0),
        (4, "done", 1, 0),
        (1, "done", 1, 0),
    ]
    assert (inventory.checksums_total, inventory.checksums_done, inventory.checksums_failed) == (9, 9, 0)
    assert inventory.checksums_finished_at is not None and inventory.checksums_finished_at >= inventory.finished_at
    assert not inventory.checksums_running
    assert checksums_of(bucket.location) == sha256s("nvme-a")
    assert CheckpointCopy.objects.filter(location=bucket.location, verification="verified").exists()
    assert sum(c.written for c in chunks) == 9
    assert all(c.items == [] for c in chunks)  # keys are kept only while something of a chunk is unresolved

    # A second delivery of a finished chunk writes nothing and counts nothing.
    assert head_chunk_run(chunks[0].pk) == "skipped"
    inventory.refresh_from_db()
    assert inventory.checksums_done == 9

    # Nothing changed: the next scan plans no chunk, and its phase is over at once.
    again = scan_now(bucket)
    assert not HeadChunk.objects.filter(inventory=again).exists()
    assert (again.checksums_total, again.checksums_finished_at is not None) == (0, True)


@pytest.mark.django_db
def test_a_bucket_without_checksums_has_no_checksum_phase(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, fetch_checksums=False)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert not HeadChunk.objects.exists()
    assert (inventory.checksums_total, inventory.checksums_finished_at) == (0, None)


# --- failures --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_chunk_slowed_down_twice_is_retried_with_backoff_and_completes(s3, faulty, scan_now, backoffs):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(head_of(SHARD), times=2)  # 503 SlowDown, twice

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 2
    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert (chunk.state, chunk.attempts, chunk.failed, chunk.error) == ("done", 3, 0, "")
    assert backoffs == [0, 1]  # the first and the second retry, each with its own (longer) backoff
    assert (inventory.checksums_done, inventory.checksums_failed) == (9, 0)
    assert inventory.checksums_finished_at is not None
    assert checksums_of(bucket.location) == sha256s("nvme-a")
    assert "stored checksums could not be fetched" not in inventory.error


def test_backoff_grows_with_each_retry_and_is_capped():
    for retries in range(8):
        delay = scan_head_chunks.head_backoff(retries)
        assert scan_head_chunks.HEAD_BACKOFF / 2 <= delay <= min(scan_head_chunks.HEAD_BACKOFF_MAX, 5.0 * 2**retries)
    assert max(scan_head_chunks.head_backoff(20) for _ in range(50)) <= scan_head_chunks.HEAD_BACKOFF_MAX


@pytest.mark.django_db
def test_a_chunk_the_store_keeps_throttling_is_given_up_after_its_retries(s3, faulty, scan_now, backoffs):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(head_of(SHARD))  # always

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED  # the snapshot stands
    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert (chunk.state, chunk.attempts, chunk.failed) == ("failed", scan_head_chunks.HEAD_RETRIES + 1, 9)
    assert fault.served == scan_head_chunks.HEAD_RETRIES + 1
    assert backoffs == list(range(scan_head_chunks.HEAD_RETRIES))
    assert (
        f"HeadObject of {SHARD}" in chunk.error
        and f"given up after {scan_head_chunks.HEAD_RETRIES + 1} attempts" in chunk.error
    )
    assert (inventory.checksums_done, inventory.checksums_failed) == (9, 9)
    assert inventory.checksums_finished_at is not None
    assert "stored checksums could not be fetched for 9 of 9 object(s)" in inventory.error
    assert set(checksums_of(bucket.location).values()) == {""}


@pytest.mark.django_db
def test_access_denied_is_recorded_and_not_retried(s3, faulty, scan_now, backoffs):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(head_of(SHARD), status=403, code="AccessDenied", message="Access Denied")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 1
    assert backoffs == []
    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert (chunk.state, chunk.attempts, chunk.failed, len(chunk.items)) == ("done", 1, 1, 9)
    assert f"HeadObject of {SHARD}" in chunk.error
    assert (inventory.checksums_done, inventory.checksums_failed) == (9, 1)
    assert "stored checksums could not be fetched for 1 of 9 object(s)" in inventory.error
    assert f"HeadObject of {SHARD}" in inventory.error
    expected = sha256s("nvme-a")
    expected[SHARD] = ""
    assert checksums_of(bucket.location) == expected  # the other objects were written


@pytest.mark.django_db
def test_an_object_rewritten_between_listing_and_head_is_left_unverified(s3, scan_now, monkeypatch):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    original = scan_scanner.head_chunks_queue

    def rewrite_then_queue(inventory_id, *, queue=None):
        # After the listing, before the HEADs: the store now holds other bytes under the key.
        s3.put(name, SHARD, b"other bytes, written after the listing")
        return original(inventory_id, queue=queue)

    monkeypatch.setattr(scan_scanner, "head_chunks_queue", rewrite_then_queue)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert (chunk.state, chunk.failed, chunk.written) == ("done", 0, 8)  # the conditional HEAD said "changed"
    shard = ShardFile.objects.get(location=bucket.location, path=SHARD)
    assert (shard.checksum, shard.size) == ("", len(tree_files("nvme-a")[SHARD]))
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-100")
    assert copy.verification != "verified"
    assert inventory.checksums_failed == 0  # not a failure: the next scan sees the new content


@pytest.mark.django_db
def test_a_shard_file_with_another_etag_by_the_time_of_the_write_is_not_written(s3, scan_now, monkeypatch):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    original = scan_head_chunks._head_items

    def later_scan_in_between(bucket_, items):
        answers = original(bucket_, items)
        # A newer scan applied meanwhile and recorded other content at this path.
        ShardFile.objects.filter(location=bucket.location, path=SHARD).update(etag="0123456789abcdef")
        return answers

    monkeypatch.setattr(scan_head_chunks, "_head_items", later_scan_in_between)

    inventory = scan_now(bucket)

    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert (chunk.state, chunk.written) == ("done", 8)
    assert ShardFile.objects.get(location=bucket.location, path=SHARD).checksum == ""
    assert inventory.checksums_done == 9


@pytest.mark.django_db
def test_chunks_whose_scan_made_no_progress_for_a_while_are_queued_again(
    s3, scan_now, monkeypatch, django_capture_on_commit_callbacks
):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    with monkeypatch.context() as m:
        m.setattr(scan_scanner, "head_chunks_queue", lambda inventory_id, *, queue=None: 0)  # the messages are lost
        inventory = scan_now(bucket)
    assert inventory.checksums_running

    assert head_chunks_resend() == 0  # applied just now: still within its time

    with django_capture_on_commit_callbacks(execute=True):
        assert head_chunks_resend(now=timezone.now() + timedelta(hours=1)) == 1  # run in-process here
    inventory.refresh_from_db()
    assert (inventory.checksums_done, inventory.checksums_running) == (9, False)
    assert checksums_of(bucket.location) == sha256s("nvme-a")


# --- progress on the pages -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_fleet_page_jobs_and_api_show_the_checksum_phase(
    s3, scan_now, signed_in, monkeypatch, django_capture_on_commit_callbacks
):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    with monkeypatch.context() as m:
        m.setattr(scan_scanner, "head_chunks_queue", lambda inventory_id, *, queue=None: 0)  # not run yet
        inventory = scan_now(bucket)

    page = signed_in.get("/fleet/").content.decode()
    assert "checksums: 0 of 9 objects" in page
    assert f'data-running="/api/v1/inventories/{inventory.pk}/"' in page
    body = signed_in.get(f"/api/v1/inventories/{inventory.pk}/").json()
    assert (body["status"], body["checksums_total"], body["checksums_done"], body["checksums_finished_at"]) == (
        "applied",
        9,
        0,
        None,
    )
    progress = signed_in.get(f"/jobs/progress.json?job=scan:{inventory.pk}").json()["jobs"][0]
    assert progress["active"] is True
    assert (progress["done"], progress["total"], progress["unit"]) == (0, 9, "objects")
    assert "checksums: 0 of 9 objects" in progress["outcome"]

    with django_capture_on_commit_callbacks(execute=True):
        head_chunks_resend(now=timezone.now() + timedelta(hours=1))

    page = signed_in.get("/fleet/").content.decode()
    assert "checksums: 9 of 9 objects" in page and "data-running" not in page
    progress = signed_in.get(f"/jobs/progress.json?job=scan:{inventory.pk}").json()["jobs"][0]
    assert progress["active"] is False and "checksums: 9 of 9 objects" in progress["outcome"]
    detail = signed_in.get(f"/fleet/inventories/{inventory.pk}/").content.decode()
    assert "Stored checksums" in detail and "checksums: 9 of 9 objects" in detail


# --- a real worker ---------------------------------------------------------------------------------


def test_a_worker_does_a_scans_head_chunks(s3, celery_worker_process, monkeypatch):
    queue = celery_app.conf.task_default_queue
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)

    # The scan goes to the worker; its chunk follows it to the worker's queue.
    inventory = scan_start(location=bucket.location, actor=Actor.command(label="tests"))

    def phase_over(pk: int):
        return lambda: Inventory.objects.get(pk=pk).checksums_finished_at is not None

    wait_for(phase_over(inventory.pk), timeout=90, what="the worker to scan and fetch the checksums")
    inventory.refresh_from_db()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    [chunk] = HeadChunk.objects.filter(inventory=inventory)
    assert chunk.state == "done" and chunk.done_by.startswith(f"{queue}@")
    assert checksums_of(bucket.location) == sha256s("nvme-a")

    # A scan applied here, with small chunks: each chunk is a task on the broker, and the worker takes them.
    monkeypatch.setattr(scan_head_plan, "HEAD_CHUNK", 2)
    s3.upload_tree(name, "nvme-a", prefix="copy/")
    here = Inventory.objects.create(location=bucket.location, source=InventorySource.BUCKET_LISTING, agent=SCANNER)
    assert scan_run(here.pk).status == InventoryStatus.APPLIED
    wait_for(phase_over(here.pk), timeout=90, what="the worker to take the chunks")
    here.refresh_from_db()
    chunks = list(HeadChunk.objects.filter(inventory=here))
    assert len(chunks) == 5 and {c.state for c in chunks} == {"done"}
    assert all(c.done_by.startswith(f"{queue}@") for c in chunks)
    assert (here.checksums_total, here.checksums_done, here.checksums_failed) == (9, 9, 0)
    assert (
        ShardFile.objects.filter(location=bucket.location, path__startswith="copy/").exclude(checksum="").count() == 9
    )
