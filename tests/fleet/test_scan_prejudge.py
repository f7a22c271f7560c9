"""A first scan recognises run directories while it lists (``ingest.scan.prejudge.PreJudge``), with the same result.

The run directories of a location's first listing are recognised as soon as the listing has passed
them, and the apply at the end only writes. Every test compares with the same bucket applied the
general way (``ingest.inventory.apply_staged``: recognised from the staged rows after the listing).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.db import transaction

import fleet.s3 as s3lib
from catalog.models import CheckpointCopy, ShardFile
from catalog.services import PathTemplate
from fleet.choices import InventoryStatus
from ingest import inventory as ingest
from ingest.inventory import Row
from ingest.scan import first_apply as scan_first_apply
from ingest.scan import listing as scan_listing
from ingest.scan import prejudge as scan_prejudge
from ingest.scan import scanner as scan_scanner
from tests.helpers.trees import EXPECTED

pytestmark = [pytest.mark.services, pytest.mark.django_db]

TREES = ("nvme-a", "pfs", "bucket")


def judged(location) -> list[tuple]:
    """Everything the judging writes, by path: copies with their verdicts, and which copy each file is in."""
    copies = [
        (
            c.path,
            c.format,
            c.checkpoint.run.team.name,
            c.checkpoint.run.name,
            c.checkpoint.step,
            c.state,
            c.reasons,
            c.temporary,
            c.file_count,
            c.bytes,
            c.expected_files,
            c.expected_bytes,
            c.newest_mtime,
            c.reference_checksums,
            c.verification,
            c.verification_reasons,
        )
        for c in CheckpointCopy.objects.filter(location=location).select_related("checkpoint__run__team")
    ]
    files = list(
        ShardFile.objects.filter(location=location).values_list(
            "path", "size", "mtime", "checksum", "facts", "etag", "tier", "gone_at", "copy__path"
        )
    )
    return sorted(copies, key=str) + sorted(files, key=str)


def fill(s3, trees=TREES) -> str:
    name = s3.bucket()
    for tree in trees:
        s3.upload_tree(name, tree, prefix=f"{tree}/" if len(trees) > 1 else "")
    return name


@pytest.fixture
def applies(monkeypatch):
    """Which apply each scan took: "prejudged" (recognised while listing) or "staged" (after it)."""
    seen: list[str] = []
    first, staged = scan_scanner.apply_first, scan_scanner.apply_staged

    def spy_first(*args, **kwargs):
        seen.append("prejudged")
        return first(*args, **kwargs)

    def spy_staged(*args, **kwargs):
        seen.append("staged")
        return staged(*args, **kwargs)

    monkeypatch.setattr(scan_scanner, "apply_first", spy_first)
    # The staged apply is looked up by the scanner, and by apply_first when the location is no longer new.
    monkeypatch.setattr(scan_scanner, "apply_staged", spy_staged)
    monkeypatch.setattr(scan_first_apply, "apply_staged", spy_staged)
    return seen


class _Rollback(Exception):
    pass


def scanned_twice(scan_now, bucket, monkeypatch) -> tuple[list[tuple], list[tuple]]:
    """What a first scan writes recognised while listing, then (rolled back in between) the general way."""
    try:
        with transaction.atomic():
            inventory = scan_now(bucket)
            assert inventory.status == InventoryStatus.APPLIED, inventory.error
            fast = judged(bucket.location), inventory.checkpoints_found, inventory.files_added
            raise _Rollback
    except _Rollback:
        pass
    assert not ShardFile.objects.filter(location=bucket.location).exists()
    with monkeypatch.context() as m:
        m.setattr(scan_prejudge.PreJudge, "usable", lambda self: False)
        inventory = scan_now(bucket)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    return fast, (judged(bucket.location), inventory.checkpoints_found, inventory.files_added)


@pytest.mark.parametrize(
    ("parallel", "chunk"),
    [(True, 5000), (False, 5000), (True, 3)],
    ids=["by-prefix", "one-sequence", "small-batches"],
)
def test_a_first_scan_recognised_while_listing_writes_what_the_staged_apply_writes(
    s3, scan_now, monkeypatch, applies, settings, parallel, chunk
):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 3)  # many pages, so run directories end mid-listing
    if not parallel:
        monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)
    settings.INGEST_CHUNK_ROWS = chunk  # 3: the apply writes a batch of run directories every 12 files
    bucket = s3.register(fill(s3))

    fast, general = scanned_twice(scan_now, bucket, monkeypatch)

    assert applies == ["prejudged", "staged"]
    assert fast == general
    _, found, added = fast
    assert added == ShardFile.objects.filter(location=bucket.location).count() > 20
    assert (
        found == CheckpointCopy.objects.filter(location=bucket.location).count() >= sum(len(EXPECTED[t]) for t in TREES)
    )
    # Nothing recognised is left unlinked that the general way links, and the re-scan changes nothing.
    inventory = scan_now(bucket)
    assert (inventory.files_added, inventory.files_changed, inventory.files_gone) == (0, 0, 0)
    assert applies[-1] == "staged"
    assert judged(bucket.location) == general[0]


def test_the_real_trees_give_the_expected_copies_recognised_while_listing(s3, scan_now, applies, monkeypatch):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 2)
    name = s3.bucket()
    s3.upload_tree(name, "pfs")
    bucket = s3.register(name)

    inventory = scan_now(bucket)

    assert applies == ["prejudged"]
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    copies = {
        (c.path, c.format, c.checkpoint.step, c.state)
        for c in CheckpointCopy.objects.filter(location=bucket.location).select_related("checkpoint")
    }
    assert copies == {(p, f, step, "complete") for p, f, step in EXPECTED["pfs"]}
    assert not ShardFile.objects.filter(location=bucket.location, copy__isnull=True, path__contains="step").exists()


def test_run_directories_beyond_the_memory_bound_are_recognised_at_the_apply(s3, scan_now, monkeypatch, applies):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 4)
    monkeypatch.setattr(scan_prejudge, "PREJUDGE_MAX_FILES", 12)
    read_back: list[str] = []
    original = ingest.staged_group

    def spy(inventory, location, template, group):
        read_back.append(group)
        return original(inventory, location, template, group)

    monkeypatch.setattr(scan_first_apply, "staged_group", spy)  # the scanner's own reference to ingest's function
    bucket = s3.register(fill(s3))

    fast, general = scanned_twice(scan_now, bucket, monkeypatch)

    assert applies == ["prejudged", "staged"]
    assert fast == general
    # Some run directories were recognised while listing, the others read back at the apply (and all of
    # them in the general scan).
    template = PathTemplate.parse("{team}/{run}")
    every = {template.group_of(path) for path in ShardFile.objects.values_list("path", flat=True)}
    first = read_back[: len(read_back) - len(every)]
    assert first and set(first) < every


def test_shard_files_that_appear_before_the_apply_send_it_the_general_way(s3, scan_now, monkeypatch, applies):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    original = scan_prejudge.PreJudge.finish

    def meanwhile(self):
        original(self)
        when = datetime(2026, 1, 1, tzinfo=UTC)
        ShardFile.objects.create(
            location=bucket.location,
            path="llm/old/leftover.bin",
            size=1,
            mtime=when,
            first_seen_at=when,
            changed_at=when,
        )

    monkeypatch.setattr(scan_prejudge.PreJudge, "finish", meanwhile)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert applies == ["prejudged", "staged"]
    assert inventory.files_gone == 1
    assert ShardFile.objects.get(path="llm/old/leftover.bin").gone_at is not None
    expected = {(p, f, step, "complete") for p, f, step in EXPECTED["nvme-a"]}
    copies = {
        (c.path, c.format, c.checkpoint.step, c.state)
        for c in CheckpointCopy.objects.filter(location=bucket.location).select_related("checkpoint")
    }
    assert copies == expected


def test_a_listing_that_fails_stops_the_recognition_and_applies_nothing(s3, scan_now, monkeypatch):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 3)
    monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)
    bucket = s3.register(fill(s3))
    original = s3lib.list_pages

    def failing(*args, **kwargs):
        for n, page in enumerate(original(*args, **kwargs)):
            if n == 5:
                raise s3lib.S3Error("Access Denied", code="AccessDenied")
            yield page

    monkeypatch.setattr(s3lib, "list_pages", failing)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert "Nothing was applied" in inventory.error
    assert not ShardFile.objects.filter(location=bucket.location).exists()
    assert not CheckpointCopy.objects.filter(location=bucket.location).exists()
    assert not [t for t in threading.enumerate() if t.name == "prejudge"]


WHEN = datetime(2026, 11, 1, tzinfo=UTC)


def rows(*paths: str) -> list[Row]:
    return [
        Row(
            path=p,
            size=10,
            mtime=WHEN,
            checksum="ab" * 32 if p.endswith("step-1/x") else "",
            checksum_algo="sha256" if p.endswith("step-1/x") else "",
            facts='{"kind":"json"}' if p.endswith("step-1/x") else None,
        )
        for p in paths
    ]


def prejudged(template: str, paths: list[str]) -> scan_prejudge.PreJudge:
    pre = scan_prejudge.PreJudge(SimpleNamespace(path_template=template))
    try:
        for row in rows(*paths):
            pre.add(row)
        pre.finish()
    finally:
        pre.stop()
    return pre


def test_run_directories_are_grouped_as_the_staged_apply_groups_them():
    paths = [
        "a/file-in-team",
        "a/run-1/step-1/x",
        "a/run-1/step-2/x",
        "a/run-1.5/y",  # '.' sorts before '/': listed before run-1's files
        "b/run/z",
        "root-file",
    ]
    # Two prefixes listed side by side interleave; each prefix's keys come in order.
    listing = ["a/file-in-team", "b/run/z", "a/run-1.5/y", "a/run-1/step-1/x", "root-file", "a/run-1/step-2/x"]
    pre = prejudged("{team}/{run}", listing)

    template = PathTemplate.parse("{team}/{run}")
    expected: dict[str, list[str]] = {}
    for path in paths:
        expected.setdefault(template.group_of(path), []).append(path)
    assert pre.usable()
    assert pre.groups == set(expected)
    assert {g: files.paths for g, (files, _) in pre.results.items()} == expected
    # What the apply makes of them again is what was listed, less the facts recognition needed.
    entries = pre.results["a/run-1"][0].entries()
    assert [(e.path, e.size, e.mtime, e.facts, e.checksum) for e in entries] == [
        ("a/run-1/step-1/x", 10, WHEN.timestamp(), None, "ab" * 32),
        ("a/run-1/step-2/x", 10, WHEN.timestamp(), None, None),
    ]


def test_a_listing_out_of_order_leaves_everything_to_the_apply():
    pre = prejudged("{team}/{run}", ["a/r/2", "a/r/1", "b/r/1"])
    assert not pre.usable()
    assert pre.results == {}
