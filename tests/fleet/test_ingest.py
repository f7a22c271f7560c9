"""Inventory upload and ingestion: snapshots, idempotence, and bad input that changes nothing."""

from __future__ import annotations

import functools
import gzip
import io
import json
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from catalog.models import CheckpointCopy, CopyTierUsage, ShardFile
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from fleet.services import gzip_lines
from ingest.inventory import check_path
from spend.models import UsageDaily
from tests.conftest import is_postgres
from tests.helpers.ingest import URL, dcp, post


@pytest.fixture
def push(client, django_capture_on_commit_callbacks):
    """Upload an inventory through the API and let its ingestion task run, as the worker would."""

    def push(kit, body: bytes, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            response = post(client, kit, body, **kwargs)
        return response

    return push


def snapshot(location) -> list[tuple]:
    return list(
        ShardFile.objects.filter(location=location)
        .order_by("path")
        .values_list("path", "size", "mtime", "checksum", "facts", "gone_at", "changed_at", "copy_id")
    )


def test_it_accepts_an_inventory_and_answers_where_to_poll(make_host, push, client):
    kit = make_host()
    response = push(kit, kit.body(dcp(100)))
    assert response.status_code == 202
    body = response.json()
    assert body["url"] == f"/api/v1/inventories/{body['id']}/"
    polled = client.get(body["url"], **kit.auth()).json()
    assert polled["status"] == "applied", polled
    assert polled["files_count"] == 3
    assert polled["files_added"] == 3
    assert ShardFile.objects.filter(location=kit.location, gone_at__isnull=True).count() == 3


def test_it_recognises_the_checkpoints_of_an_inventory(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100) + dcp(200, missing=1)))
    copies = {c.checkpoint.step: c for c in CheckpointCopy.objects.select_related("checkpoint__run__team")}
    assert set(copies) == {100, 200}
    assert copies[100].state == "complete"
    assert copies[100].checkpoint.run.name == "llama-7b"
    assert copies[100].checkpoint.run.team.name == "llm"
    assert copies[200].state == "partial"
    assert any("__1_0.distcp" in r for r in copies[200].reasons)
    assert ShardFile.objects.filter(copy=copies[100]).count() == 3


def test_the_same_inventory_twice_changes_nothing(make_host, push):
    kit = make_host()
    body = kit.body(dcp(100) + dcp(200))
    push(kit, body)
    before = snapshot(kit.location)
    push(kit, body)
    second = Inventory.objects.order_by("-id").first()
    assert second.status == InventoryStatus.APPLIED
    assert (second.files_added, second.files_changed, second.files_gone) == (0, 0, 0)
    assert snapshot(kit.location) == before


def test_a_file_gone_since_the_last_inventory_is_marked_gone_and_kept(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    files = [f for f in dcp(100) if not f["path"].endswith("__1_0.distcp")]
    push(kit, kit.body(files))
    latest = Inventory.objects.order_by("-id").first()
    assert latest.files_gone == 1
    gone = ShardFile.objects.get(path="llm/llama-7b/step-100/__1_0.distcp")
    assert gone.gone_at is not None and gone.last_seen_at is not None
    copy = CheckpointCopy.objects.get()
    assert copy.state == "partial"
    assert any("__1_0.distcp" in r for r in copy.reasons)
    # The file comes back: the same row, present again, and the copy is complete again.
    push(kit, kit.body(dcp(100)))
    gone.refresh_from_db()
    assert gone.gone_at is None
    assert CheckpointCopy.objects.get().state == "complete"


def test_a_checkpoint_whose_files_all_went_is_marked_gone(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100) + dcp(200)))
    push(kit, kit.body(dcp(200)))
    gone = CheckpointCopy.objects.get(checkpoint__step=100)
    assert gone.gone_at is not None
    assert CheckpointCopy.objects.get(checkpoint__step=200).gone_at is None


def test_a_changed_file_is_updated(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    files = dcp(100)
    files[1] = {**files[1], "size": 10, "mtime": files[1]["mtime"] + 60}
    push(kit, kit.body(files))
    latest = Inventory.objects.order_by("-id").first()
    assert (latest.files_added, latest.files_changed, latest.files_gone) == (0, 1, 0)
    assert ShardFile.objects.get(path=files[1]["path"]).size == 10


def test_it_rejects_a_token_of_another_host(make_host, push):
    a = make_host("gpu-a01", "/mnt/nvme0/a")
    b = make_host("gpu-b01", "/mnt/nvme0/b")
    response = push(a, a.body(dcp(100), host="gpu-b01", root=b.root))
    assert response.status_code == 403
    assert "gpu-a01" in response.json()["detail"]
    assert Inventory.objects.count() == 0
    assert ShardFile.objects.count() == 0


def test_it_rejects_a_root_the_host_has_not_registered(make_host, push):
    kit = make_host()
    response = push(kit, kit.body(dcp(100), root="/etc"))
    assert response.status_code == 400
    assert response.json()["error"] == "unknown_root"
    assert Inventory.objects.count() == 0


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ({"root": "/mnt/nvme0/checkpoints\x00x"}, "NUL character"),  # was a PostgreSQL DataError: HTTP 500
        ({"agent": "x\x00"}, "NUL character"),
        ({"agent": functools.reduce(lambda inner, _: [inner], range(69), [])}, "deeper than 64"),
    ],
    ids=["nul-in-root", "nul-in-agent", "deep"],
)
def test_a_header_with_a_nul_or_deep_nesting_is_refused_and_nothing_is_stored(make_host, push, header, why):
    kit = make_host()
    lines = kit.lines(dcp(100))
    lines[0].update(header)
    response = push(kit, gzip_lines(lines))
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "bad_inventory"
    assert why in response.json()["detail"] and response.json()["detail"].startswith("line 1:")
    assert Inventory.objects.count() == 0


@pytest.mark.parametrize(
    "auth", [{}, {"HTTP_AUTHORIZATION": "Bearer cfh_nope_nope"}, {"HTTP_AUTHORIZATION": "Bearer not-a-token"}]
)
def test_it_rejects_a_missing_or_wrong_token(make_host, push, auth):
    kit = make_host()
    response = push(kit, kit.body(dcp(100)), auth=auth)
    assert response.status_code in (401, 403)
    assert Inventory.objects.count() == 0


def test_a_rotated_token_stops_working(make_host, push, actor):
    from fleet.services import host_token_issue

    kit = make_host()
    old = kit.auth()
    kit.token = host_token_issue(host=kit.host, actor=actor)
    assert push(kit, kit.body(dcp(100)), auth=old).status_code == 401
    assert push(kit, kit.body(dcp(100))).status_code == 202


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("llm/run/../../../etc/passwd", "'..'"),
        ("/etc/passwd", "absolute"),
        ("llm/run/a\x00b", "control"),
        ("llm/run/a\nb", "control"),
        ("llm//run/x", "empty"),
        ("llm/./run/x", "'.'"),
        ("llm\\run\\x", "backslash"),
        ("", "non-empty"),
    ],
)
def test_it_rejects_a_hostile_path_and_applies_nothing(make_host, push, path, why):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    before = snapshot(kit.location)
    files = [*dcp(200), {"path": path, "size": 1, "mtime": 1763700000.0}]
    response = push(kit, kit.body(files))
    assert response.status_code == 202
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert why in inventory.error
    assert inventory.error_line == len(files) + 1
    assert snapshot(kit.location) == before
    assert not CheckpointCopy.objects.filter(checkpoint__step=200).exists()


def test_check_path_accepts_ordinary_names():
    assert check_path("team/run/checkpoint-100/model-00001-of-00002.safetensors")
    assert check_path("team/run/epoch=0-step=100.ckpt")
    assert check_path("team/ran ü/.metadata")


def test_a_truncated_gzip_fails_and_applies_nothing(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    before = snapshot(kit.location)
    body = kit.body(dcp(100) + dcp(200) * 1)
    response = push(kit, body[: len(body) - 30])
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert "truncated" in inventory.error or "damaged" in inventory.error
    assert snapshot(kit.location) == before


def test_an_inventory_without_its_end_line_is_truncated(make_host, push):
    kit = make_host()
    response = push(kit, kit.body(dcp(100), end=False))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert "no end line" in inventory.error
    assert ShardFile.objects.count() == 0


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        (b"{not json\n", "not valid JSON"),
        (b'["a list"]\n', "JSON object"),
        (b'{"type": "file", "path": "a/b", "size": -1, "mtime": 1}\n', "size"),
        (b'{"type": "file", "path": "a/b", "size": "12", "mtime": 1}\n', "size"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": "yesterday"}\n', "mtime"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "sha256": "xyz"}\n', "sha256"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "facts": []}\n', "facts"),
        (b'{"type": "surprise"}\n', "unknown line type"),
        (b'{"type": "header", "format": "ckptfleet-inventory/1"}\n', "second header"),
    ],
)
def test_a_malformed_line_fails_with_its_line_number(make_host, push, bad_line, why):
    kit = make_host()
    lines = kit.lines(dcp(100))
    text = b"".join(json.dumps(line).encode() + b"\n" for line in lines[:-1]) + bad_line
    response = push(kit, gzip.compress(text + json.dumps(lines[-1]).encode() + b"\n"))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert why in inventory.error
    assert inventory.error_line == len(lines)
    assert ShardFile.objects.count() == 0


def test_a_path_reported_twice_fails(make_host, push):
    kit = make_host()
    files = dcp(100)
    response = push(kit, kit.body([*files, files[1]]))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert "more than once" in inventory.error
    assert ShardFile.objects.count() == 0


def test_end_counts_that_disagree_fail(make_host, push):
    kit = make_host()
    lines = kit.lines(dcp(100))
    lines[-1]["files"] = 99
    response = push(kit, gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines)))
    assert Inventory.objects.get(pk=response.json()["id"]).status == InventoryStatus.FAILED


def test_it_refuses_an_oversized_body_before_storing_it(make_host, push):
    kit = make_host()
    with override_settings(INVENTORY_MAX_BYTES=1024):
        files = [{"path": f"llm/r/step-1/f{i}", "size": i, "mtime": 1763700000.0 + i} for i in range(3000)]
        response = push(kit, kit.body(files))
    assert response.status_code == 413
    assert "CKPTFLEET_INVENTORY_MAX_BYTES" in response.json()["detail"]
    assert Inventory.objects.count() == 0


def test_it_refuses_an_uncompressed_or_garbage_body(make_host, client):
    kit = make_host()
    response = client.post(URL, data=b'{"type": "header"}\n', content_type="application/x-ndjson", **kit.auth())
    assert response.status_code == 400
    response = client.post(
        URL, data=b"garbage", content_type="application/x-ndjson", HTTP_CONTENT_ENCODING="gzip", **kit.auth()
    )
    assert response.status_code == 400
    assert response.json()["error"] == "bad_inventory"
    assert Inventory.objects.count() == 0


def test_an_inventory_is_ingested_once_even_if_the_task_runs_twice(make_host, push):
    from ingest import inventory as ingest

    kit = make_host()
    response = push(kit, kit.body(dcp(100)))
    assert ingest.ingest(response.json()["id"]) is None
    assert ingest.ingest(response.json()["id"], claim="another-task") is None


def test_a_host_cannot_read_another_hosts_inventory(make_host, push, client):
    a = make_host("gpu-a01", "/mnt/a")
    b = make_host("gpu-b01", "/mnt/b")
    response = push(a, a.body(dcp(100)))
    assert client.get(response.json()["url"], **b.auth()).status_code == 403


def test_people_need_to_sign_in_to_read_the_api(client, admin_client, make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    assert client.get("/api/v1/runs/").status_code in (401, 403)
    runs = admin_client.get("/api/v1/runs/").json()["results"]
    assert [r["name"] for r in runs] == ["llama-7b"]
    assert runs[0]["checkpoint_count"] == 1


def test_the_sweeper_requeues_lost_fails_abandoned_and_removes_old_uploads(make_host, client):
    from datetime import timedelta

    from django.utils import timezone

    from ingest import inventory as ingest

    kit = make_host()
    lost = post(client, kit, kit.body(dcp(100))).json()["id"]  # on_commit never ran: the message was lost
    abandoned = post(client, kit, kit.body(dcp(200))).json()["id"]
    Inventory.objects.filter(pk=abandoned).update(status=InventoryStatus.PROCESSING, started_at=timezone.now())
    later = timezone.now() + timedelta(hours=3)
    counts = ingest.sweep(now=later)
    assert (counts.resent, counts.abandoned) == (1, 1)
    assert Inventory.objects.get(pk=lost).status == InventoryStatus.APPLIED
    gave_up = Inventory.objects.get(pk=abandoned)
    assert gave_up.status == InventoryStatus.FAILED and "abandoned" in gave_up.error
    counts = ingest.sweep(now=later + timedelta(days=2))
    assert counts.uploads_removed == 1
    assert Inventory.objects.get(pk=lost).upload == ""


def test_an_empty_inventory_of_a_root_that_had_files_is_refused(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    before = snapshot(kit.location)
    response = push(kit, kit.body([]))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert "mounted" in inventory.error
    assert snapshot(kit.location) == before
    lines = kit.lines([])
    lines[0]["allow_empty"] = True
    from fleet.services import gzip_lines

    response = push(kit, gzip_lines(lines))
    assert Inventory.objects.get(pk=response.json()["id"]).files_gone == 3


def test_facts_with_a_nul_character_become_an_error_fact(make_host, push):
    kit = make_host()
    files = [
        {
            "path": "llm/r/ckptfleet.json",
            "size": 10,
            "mtime": 1763700000.0,
            "facts": {"kind": "json", "content": {"run": "a\u0000b"}},
        }
    ]
    response = push(kit, kit.body(files))
    assert Inventory.objects.get(pk=response.json()["id"]).status == InventoryStatus.APPLIED
    assert ShardFile.objects.get().facts == {"kind": "json", "error": "facts contain a NUL character"}


# --- the one-pass first inventory, the staged merge, and what both write -------------------------


def judged(location) -> list[tuple]:
    """Every copy of a location and its files, as the ingest left them, comparable across locations."""
    copies = CheckpointCopy.objects.filter(location=location).select_related("checkpoint__run__team")
    out = []
    for c in copies.order_by("path"):
        files = sorted(c.files.filter(gone_at__isnull=True).values_list("path", flat=True))
        out.append(
            (c.path, c.checkpoint.run.team.name, c.checkpoint.run.name, c.checkpoint.step, c.format, c.state,
             tuple(c.reasons), c.verification, tuple(c.verification_reasons), c.file_count, c.bytes, tuple(files))
        )  # fmt: skip
    return out


def many(runs: int, steps: int, ranks: int) -> list[dict]:
    files = []
    for r in range(runs):
        for s in range(1, steps + 1):
            files += dcp(s * 100, ranks, run=f"run-{r}", missing=1 if (r, s) == (0, 2) else None)
    return sorted(files, key=lambda f: f["path"])


def test_a_first_inventory_in_path_order_and_one_out_of_order_are_judged_alike(make_host, push, settings):
    settings.INGEST_CHUNK_ROWS = 100  # judged, written and verified in several batches of 400 files
    files = many(runs=3, steps=6, ranks=30)  # 558 files in 3 run directories
    sorted_kit = make_host("gpu-a01", "/mnt/nvme0/ckpt")
    shuffled_kit = make_host("gpu-a02", "/mnt/nvme0/ckpt")
    push(sorted_kit, sorted_kit.body(files))
    push(shuffled_kit, shuffled_kit.body(list(reversed(files))))  # staged, then merged
    for kit in (sorted_kit, shuffled_kit):
        inventory = Inventory.objects.filter(location=kit.location).get()
        assert inventory.status == InventoryStatus.APPLIED, inventory.error
        assert (inventory.files_count, inventory.files_added) == (len(files), len(files))
        assert inventory.checkpoints_found == 18
        # Every file of a checkpoint is linked to its copy as it is written.
        assert not ShardFile.objects.filter(location=kit.location, copy__isnull=True).exists()
    first, second = judged(sorted_kit.location), judged(shuffled_kit.location)
    assert first == second
    assert [row[5] for row in first].count("partial") == 1
    # Two copies of each checkpoint now, neither with checksums: verification says why, for each.
    assert {row[7] for row in first} == {"unverified"}


def test_a_second_inventory_links_its_new_files_and_leaves_the_others_untouched(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100) + dcp(200)))
    first = Inventory.objects.get()
    push(kit, kit.body(dcp(100) + dcp(200) + dcp(300)))
    second = Inventory.objects.order_by("-id").first()
    assert (second.files_added, second.files_changed, second.files_gone) == (3, 0, 0)
    new = ShardFile.objects.filter(path__startswith="llm/llama-7b/step-300/")
    copy = CheckpointCopy.objects.get(checkpoint__step=300)
    assert sorted(new.values_list("copy_id", flat=True)) == [copy.pk] * 3
    assert set(new.values_list("changed_by_id", flat=True)) == {second.pk}
    old = ShardFile.objects.exclude(path__startswith="llm/llama-7b/step-300/")
    assert set(old.values_list("changed_by_id", flat=True)) == {first.pk}
    assert copy.state == "complete" and copy.file_count == 3


def test_files_stay_linked_to_the_copies_that_claim_them_as_copies_change(make_host, push):
    kit = make_host()
    push(kit, kit.body(dcp(100) + dcp(200)))
    # step-100 loses its manifest, step-200 its second rank, and step-300 arrives.
    files = [f for f in dcp(100) if not f["path"].endswith(".metadata")] + dcp(200, missing=1) + dcp(300)
    push(kit, kit.body(files))
    present = CheckpointCopy.objects.filter(location=kit.location, gone_at__isnull=True)
    for copy in present:
        linked = set(ShardFile.objects.filter(copy=copy, gone_at__isnull=True).values_list("path", flat=True))
        assert len(linked) == copy.file_count, (copy.path, linked)
        assert all(p.startswith(copy.path + "/") or p == copy.path for p in linked)
    present_files = ShardFile.objects.filter(location=kit.location, gone_at__isnull=True)
    assert not present_files.filter(copy__gone_at__isnull=False).exists()
    assert sorted(present_files.values_list("path", flat=True)) == sorted(f["path"] for f in files)


def test_a_path_reported_twice_in_a_row_fails_in_the_one_pass_ingest(make_host, push):
    kit = make_host()
    files = dcp(100)
    response = push(kit, kit.body([*files, files[-1]]))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert f"the path {files[-1]['path']!r} is reported more than once" in inventory.error
    assert not ShardFile.objects.exists() and not CheckpointCopy.objects.exists()


def test_a_bad_line_late_in_a_first_inventory_applies_nothing(make_host, push, settings):
    settings.INGEST_CHUNK_ROWS = 100  # earlier run directories were already written when it fails
    kit = make_host()
    files = many(runs=2, steps=5, ranks=30)
    lines = kit.lines(files)
    lines[-2] = {**lines[-2], "size": -1}
    response = push(kit, gzip_lines(lines))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert inventory.error_line == len(lines) - 1
    assert not ShardFile.objects.exists() and not CheckpointCopy.objects.exists()


def test_shard_files_refer_to_locations_and_copies_that_exist(make_host, push):
    if not is_postgres():
        pytest.skip("the statement-level reference checks are PostgreSQL's; SQLite keeps its foreign keys")
    kit = make_host()
    push(kit, kit.body(dcp(100)))
    row = ShardFile.objects.filter(copy__isnull=False).first()
    with pytest.raises(IntegrityError), transaction.atomic():
        ShardFile.objects.filter(pk=row.pk).update(copy_id=row.copy_id + 1000)
    with pytest.raises(IntegrityError), transaction.atomic():
        ShardFile.objects.filter(pk=row.pk).update(location_id=kit.location.pk + 1000)
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM catalog_checkpointcopy WHERE id = %s", [row.copy_id])
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM fleet_storagelocation WHERE id = %s", [kit.location.pk])
    # The ORM's own cascade and SET NULL still work: the rows are handled before the delete.
    CheckpointCopy.objects.filter(pk=row.copy_id).delete()
    row.refresh_from_db()
    assert row.copy_id is None


# --- the one-pass first inventory and the line-by-line one agree ---------------------------------


def odd_files() -> list[dict]:
    """Files whose values test the edges of parsing: mtimes that round at the microsecond, before
    1970 and after 2255 (where microseconds no longer fit a double exactly), integers as mtimes,
    checksums, facts with floats and text outside ASCII, quotes in a path."""
    files = dcp(100, ranks=3) + dcp(200, ranks=2, missing=1)
    files += [
        {"path": 'llm/llama-7b/odd/a "quoted" name.pt', "size": 0, "mtime": 1763700000.0000005},
        {"path": "llm/llama-7b/odd/b.pt", "size": 2**62, "mtime": 1763700000.9999996},
        {"path": "llm/llama-7b/odd/c.pt", "size": 7, "mtime": -1.5},
        {"path": "llm/llama-7b/odd/d.pt", "size": 7, "mtime": 13_000_000_000.123457},
        {"path": "llm/llama-7b/odd/e.pt", "size": 7, "mtime": 1763700001},
        {
            "path": "llm/llama-7b/odd/f.pt",
            "size": 3 * 2**20 + 5,
            "mtime": 1763700002.5,
            "sha256": "cd" * 32,
            "checksums": {"crc32": "0a0b0c0d", "blocks": {"size": 2**20, "crc32": "AAAAAQAAAAIAAAADAAAABA=="}},
            "checksummed_at": 1763700100.125,
        },
        {"path": "llm/llama-7b/odd/ü ☃.pt", "size": 9, "mtime": 1763700000.1, "sha256": "ab" * 32},
        {
            "path": "llm/llama-7b/odd/ckptfleet.json",
            "size": 120,
            "mtime": 1763700000.25,
            "facts": {"kind": "json", "content": {"loss": 0.1 + 0.2, "big": 1e300, "name": 'ü "x"\\'}},
        },
        {"path": "llm/readme.txt", "size": 3, "mtime": 1763700000.5},
        {"path": "top.txt", "size": 3, "mtime": 1763700000.5},
    ]
    return sorted(files, key=lambda f: f["path"].encode())


def rows_of(location) -> list[tuple]:
    return list(
        ShardFile.objects.filter(location=location)
        .order_by("path")
        .values_list(
            "path", "size", "mtime", "checksum", "checksum_algo", "facts", "storage_class", "tier", "etag",
            "version_id", "legal_hold", "retain_until", "gone_at", "last_seen_at", "digests",
        )
    )  # fmt: skip


def usage_of(location) -> list[tuple]:
    daily = UsageDaily.objects.filter(location=location).order_by("run_id", "state", "tier")
    per_copy = CopyTierUsage.objects.filter(location=location).order_by("copy__path", "tier")
    return [
        *daily.values_list("day", "run__name", "run_status", "tier", "storage_class", "state", "bytes", "files",
                           "cost_nanos"),
        *per_copy.values_list("copy__path", "tier", "storage_class", "bytes", "files"),
    ]  # fmt: skip


def test_the_one_pass_first_inventory_writes_what_the_line_by_line_one_writes(
    make_host, push, monkeypatch, caplog, settings
):
    import logging

    from ingest.inventory import run as inventory_run
    from spend.usage import usage_refresh

    settings.INGEST_CHUNK_ROWS = 100  # judged and written in batches of 400 files, overlapping
    files = sorted(odd_files() + many(runs=3, steps=6, ranks=30), key=lambda f: f["path"].encode())
    direct_kit = make_host("gpu-a01", "/mnt/nvme0/ckpt")
    python_kit = make_host("gpu-a02", "/mnt/nvme0/ckpt")
    with caplog.at_level(logging.INFO, logger="ingest.inventory"):
        push(direct_kit, direct_kit.body(files))
    assert "applied (direct)" in caplog.text
    caplog.clear()
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger="ingest.inventory"):
        patched.setattr(inventory_run, "ingest_direct", lambda inventory, started: None)  # where run looks it up
        push(python_kit, python_kit.body(files))
    assert "applied (staged)" in caplog.text
    for kit in (direct_kit, python_kit):
        inventory = Inventory.objects.filter(location=kit.location).get()
        assert inventory.status == InventoryStatus.APPLIED, inventory.error
        assert (inventory.files_count, inventory.files_added) == (len(files), len(files))
        assert inventory.bytes_total == sum(f["size"] for f in files)
    assert rows_of(direct_kit.location) == rows_of(python_kit.location)
    # Each location's copies are verified against the other's: name the other one alike.
    assert [str(copy).replace("gpu-a02", "gpu-a01") for copy in judged(direct_kit.location)] == [
        str(copy).replace("gpu-a02", "gpu-a01") for copy in judged(python_kit.location)
    ]
    facts = ShardFile.objects.get(location=direct_kit.location, path="llm/llama-7b/odd/ckptfleet.json").facts
    assert (facts["content"]["loss"], facts["content"]["name"]) == (0.1 + 0.2, 'ü "x"\\')
    # The usage rollup summed from what the one-pass ingest wrote is the one read back from the files.
    summed = usage_of(direct_kit.location)
    assert summed == usage_of(python_kit.location) and summed
    day = UsageDaily.objects.filter(location=direct_kit.location).values_list("day", flat=True).first()
    usage_refresh(location=direct_kit.location, day=day)
    assert usage_of(direct_kit.location) == summed
    # The re-push is parsed line by line: it must find every row the one-pass ingest wrote unchanged.
    push(direct_kit, direct_kit.body(files))
    again = Inventory.objects.filter(location=direct_kit.location).order_by("-id").first()
    assert (again.status, again.files_added, again.files_changed, again.files_gone) == ("applied", 0, 0, 0)
    assert not ShardFile.objects.filter(changed_by=again).exists()


@pytest.mark.parametrize(
    "line",
    [
        # Valid, in forms the agent does not write: applied all the same.
        '{"type":"file","path":"llm/r/step-1/x.pt","size":-0,"mtime":1763700000}',
        '{"type":"file","path":"llm/r/step-1/x.pt","size":1,"mtime":1763700000,"sha256":"\\u0061' + "a" * 63 + '"}',
        '{"type":"fil\\u0065","path":"llm/r/step-1/x.pt","size":1,"mtime":1763700000}',
        '{"type":"file","path":"llm/r/step-1/x.pt","size":1,"mtime":1763700000}\r',
    ],
)
def test_an_unusual_but_valid_line_is_applied(make_host, push, line):
    kit = make_host()
    lines = kit.lines(dcp(100))
    end = {
        **lines[-1],
        "files": lines[-1]["files"] + 1,
        "bytes": lines[-1]["bytes"] + (0 if '"size":-0' in line else 1),
    }
    text = b"".join(json.dumps(x).encode() + b"\n" for x in lines[:-1]) + line.encode() + b"\n"
    response = push(kit, gzip.compress(text + json.dumps(end).encode() + b"\n"))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert ShardFile.objects.filter(location=kit.location).count() == 4


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        (b'{"type": "file", "path": "a/b", "size": 1.0, "mtime": 1}\n', "size"),
        (b'{"type": "file", "path": "a/b", "size": 1e3, "mtime": 1}\n', "size"),
        (b'{"type": "file", "path": "a/b", "size": true, "mtime": 1}\n', "size"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": NaN}\n', "mtime"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1e300}\n', "mtime"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": null}\n', "mtime"),
        (b'{"type": "file", "path": "a\\u0000b", "size": 1, "mtime": 1}\n', "control"),
        (b'{"type": "file", "path": "a\\u007fb", "size": 1, "mtime": 1}\n', "control"),
        (b'{"type": "file", "path": "a\\\\b", "size": 1, "mtime": 1}\n', "backslash"),
        (b'{"type": "file", "path": "a/\\u002e\\u002e/b", "size": 1, "mtime": 1}\n', "'..'"),
        (b'{"type": "file", "path": 12, "size": 1, "mtime": 1}\n', "non-empty string"),
        (b'{"type": "file", "path": "a/\xff", "size": 1, "mtime": 1}\n', "not valid JSON"),
        (b'{"type": "file", "size": 1, "mtime": 1}\n', "non-empty string"),
        (b"\\.\n", "not valid JSON"),
        (b"\n", "not valid JSON"),
        (b'{"type": "header", "format": "ckptfleet-inventory/1"}\n', "second header"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "checksums": {"crc32": "XYZ"}}\n', "crc32 must"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "checksums": {"blake3": "00"}}\n', "unknown key"),
        (b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "checksummed_at": "now"}\n', "checksummed_at"),
        (
            b'{"type": "file", "path": "a/b", "size": 3145728, "mtime": 1, '
            b'"checksums": {"blocks": {"size": 1048576, "crc32": "AAAAAQ=="}}}\n',
            "base64 of 3 big-endian crc32 values",
        ),
        # A lone surrogate in the facts (issue 26): jsonb refused it at the insert, which crashed the ingest task.
        (
            b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "facts": {"kind": "json", "run": "x\\ud800"}}\n',
            "not valid UTF-8 (a lone surrogate)",
        ),
        (
            b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "facts": {"kind": "json", "\\udfff": [1]}}\n',
            "not valid UTF-8 (a lone surrogate)",
        ),
        # Facts nested 5,000 deep: a RecursionError crashed the ingest task and left it "processing" for 2 hours.
        pytest.param(
            b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "facts": {"kind": "x", "v": '
            + b"[" * 5000
            + b"]" * 5000
            + b"}}\n",
            "JSON nested deeper than 64 levels",
            id="facts-5000-deep",
        ),
        pytest.param(
            b'{"type": "file", "path": "a/b", "size": 1, "mtime": 1, "deep": ' + b"[" * 65 + b"]" * 65 + b"}\n",
            "JSON nested deeper than 64 levels",
            id="65-deep",
        ),
    ],
)
def test_a_first_inventory_with_a_bad_line_fails_with_its_line_number_and_reason(make_host, push, bad_line, why):
    kit = make_host()
    lines = kit.lines(dcp(100) + dcp(200))
    text = b"".join(json.dumps(line).encode() + b"\n" for line in lines[:3]) + bad_line
    text += b"".join(json.dumps(line).encode() + b"\n" for line in lines[3:])
    response = push(kit, gzip.compress(text))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert why in inventory.error, inventory.error
    assert inventory.error_line == 4
    assert not ShardFile.objects.exists() and not CheckpointCopy.objects.exists()


def test_a_path_reported_twice_out_of_order_fails(make_host, push):
    kit = make_host()
    files = dcp(100) + dcp(200)
    response = push(kit, kit.body([*files, files[0]]))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED
    assert f"the path {files[0]['path']!r} is reported more than once" in inventory.error
    assert not ShardFile.objects.exists() and not CheckpointCopy.objects.exists()


# --- the one-pass reader's own arithmetic ----------------------------------------------------------

_EDGE_MTIMES = [
    0, 1, -1, 1763700000, 1763700000.0000005, 1763700000.0000015, 1763700000.9999995, 1763700000.9999996,
    -0.5e-6, -1.5e-6, -1.5, 0.9999995, 13_000_000_000.123457, 253_000_000_000.5, -62_000_000_000.25,
]  # fmt: skip


@pytest.mark.parametrize(
    "encode",
    [
        # The agent's own form, read by the reader's pattern; and JSON with spaces and escapes, read by orjson.
        lambda line: json.dumps(line, separators=(",", ":"), ensure_ascii=False),
        json.dumps,
    ],
    ids=["agent-form", "other-form"],
)
@given(mtimes=st.lists(st.floats(min_value=-6.2e10, max_value=2.5e11, allow_nan=False) | st.integers(-6e10, 2.5e11)))
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_one_pass_reader_rounds_mtimes_as_datetime_does(encode, mtimes):
    """The reader turns an mtime into COPY text and seconds without building a datetime: it must round
    to the microsecond exactly as datetime.fromtimestamp does, or a re-push would find rows changed."""
    from catalog.services import PathTemplate
    from ingest.inventory.direct_reader import Lines, Reader

    mtimes = [*_EDGE_MTIMES, *mtimes]
    lines = [{"type": "header", "format": "ckptfleet-inventory/1"}]
    lines += [{"type": "file", "path": f"t/r/f{i:06}ü", "size": i, "mtime": m} for i, m in enumerate(mtimes)]
    lines.append({"type": "end", "files": len(mtimes), "bytes": sum(range(len(mtimes)))})
    body = gzip.compress("".join(encode(line) + "\n" for line in lines).encode())
    upload = Lines(io.BytesIO(body), 1 << 20)
    reader = Reader(upload, PathTemplate.parse("{team}/{run}"), 1 << 20, pg=True)
    got = [
        (e.path, e.size, e.mtime, x[0])
        for _, entries, extras in reader.groups()
        for e, x in zip(entries, extras, strict=True)
    ]
    want = []
    for i, m in enumerate(mtimes):
        when = datetime.fromtimestamp(m, UTC)
        want.append((f"t/r/f{i:06}ü", i, when.timestamp(), f"{when.year:04}-{when:%m-%d %H:%M:%S.%f}+00"))
    assert got == want
