"""The checkpoints API gives each copy the tier of its files' storage classes, for every class the docs map
(docs/admin/buckets.md, "Storage classes map to tiers").

A copy's tier comes from its files (``ShardFile.tier``, which a scan sets from the object's storage class
through the bucket's tier map), summed per copy in ``CopyTierUsage``; the location's tier is only the
default for classes nobody mapped and for hosts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from fleet.choices import DEFAULT_STORAGE_CLASS_TIERS, InventoryStatus
from ingest.scan import bucket_add
from spend.usage import usage_refresh
from tests.s3 import TREES

BUCKETS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "admin" / "buckets.md"
NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)
# The S3 classes moto's server stores; OUTPOSTS and SNOW (on-premises devices), GCS and S3-gateway names it
# refuses, so they are walked as a scan records them, in the first test.
S3_CLASSES = {
    "STANDARD",
    "REDUCED_REDUNDANCY",
    "EXPRESS_ONEZONE",
    "INTELLIGENT_TIERING",
    "STANDARD_IA",
    "ONEZONE_IA",
    "GLACIER_IR",
    "GLACIER",
    "DEEP_ARCHIVE",
}


def documented_table() -> dict[str, str]:
    """{storage class: tier} from the "Storage classes map to tiers" table of docs/admin/buckets.md."""
    text = BUCKETS_PAGE.read_text()
    table = text[text.index("| storage class | tier |") :].split("\n\n", 1)[0]
    mapping = {}
    for line in table.splitlines()[2:]:
        classes, tier = line.strip("|").split("|")
        for name in re.findall(r"`([A-Z_]+)`", classes):
            mapping[name] = re.findall(r"`([a-z_]+)`", tier)[0]
    return mapping


TABLE = documented_table()


def test_the_documented_table_is_the_mapping_the_code_uses():
    assert TABLE == DEFAULT_STORAGE_CLASS_TIERS
    assert S3_CLASSES <= set(TABLE)


def api_copies(client) -> dict[str, dict]:
    data = client.get("/api/v1/checkpoints/", {"page_size": 1000}).json()
    results = data["results"] if isinstance(data, dict) else data
    return {f"{c['run']}": copy for c in results for copy in c["copies"]}


@pytest.mark.django_db
def test_every_storage_class_of_the_table_gives_its_tier_in_the_api(signed_in):
    """Files as a scan records them (tier from the bucket's map), rolled up as an ingest does, then read back."""
    bucket = bucket_add(
        name="s3:archive",
        bucket_name="archive",
        endpoint_url="http://s3.invalid:9000",
        region_name="us-east-1",
        actor=Actor.command(label="tests"),
    )
    location = bucket.location
    team = Team.objects.create(name="llm")
    for storage_class in TABLE:
        run = Run.objects.create(team=team, name=storage_class.lower())
        checkpoint = Checkpoint.objects.create(run=run, step=100)
        path = f"llm/{run.name}/epoch=0-step=100.ckpt"
        copy = CheckpointCopy.objects.create(
            checkpoint=checkpoint, location=location, path=path, format="single_file", state="complete", bytes=4096
        )
        ShardFile.objects.create(
            location=location,
            path=path,
            size=4096,
            mtime=NOW,
            storage_class=storage_class,
            tier=bucket.tier_of(storage_class),
            copy=copy,
            first_seen_at=NOW,
            changed_at=NOW,
        )
    usage_refresh(location=location, day=NOW.date(), now=NOW)

    copies = api_copies(signed_in)
    for storage_class, tier in TABLE.items():
        copy = copies[storage_class.lower()]
        assert (copy["tier"], copy["storage_class"]) == (tier, storage_class), storage_class
        assert copy["tiers"] == [{"tier": tier, "storage_class": storage_class, "bytes": 4096, "files": 1}]
        assert copy["location_tier"] == "object_standard"


@pytest.mark.services
@pytest.mark.django_db
def test_a_scanned_bucket_gives_each_s3_class_its_tier_and_a_mixed_copy_its_coldest(s3, scan_now, signed_in):
    name = s3.bucket()
    lightning = (TREES / "nvme-a/vision/resnet-tiny/epoch=0-step=100.ckpt").read_bytes()
    for storage_class in sorted(S3_CLASSES):
        s3.put(name, f"vision/{storage_class.lower()}/epoch=0-step=100.ckpt", lightning, StorageClass=storage_class)
    # One DCP save whose shards went to Glacier and whose manifest stayed in Standard.
    s3.upload_tree(name, "nvme-a", prefix="", classes={"llm/llama-tiny/step-100/*.distcp": "GLACIER"})
    # A bucket that keeps Intelligent-Tiering apart from its Standard objects.
    bucket = s3.register(name, storage_class_tiers={"INTELLIGENT_TIERING": "object_infrequent"})

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    copies = api_copies(signed_in)
    for storage_class in S3_CLASSES:
        copy = copies[storage_class.lower()]
        tier = "object_infrequent" if storage_class == "INTELLIGENT_TIERING" else TABLE[storage_class]
        assert (copy["tier"], copy["storage_class"]) == (tier, storage_class), storage_class
    mixed = copies["llama-tiny"]
    assert (mixed["tier"], mixed["storage_class"]) == ("archive", "GLACIER")
    assert [(t["tier"], t["storage_class"], t["files"]) for t in mixed["tiers"]] == [
        ("archive", "GLACIER", 2),
        ("object_standard", "STANDARD", 1),
    ]


@pytest.mark.django_db
def test_copies_carry_what_decided_their_verification_and_when_and_the_schema_says_so(signed_in):
    bucket = bucket_add(
        name="s3:verified",
        bucket_name="verified",
        endpoint_url="http://s3.invalid:9000",
        region_name="us-east-1",
        actor=Actor.command(label="tests"),
    )
    run = Run.objects.create(team=Team.objects.create(name="llm"), name="llama")
    CheckpointCopy.objects.create(
        checkpoint=Checkpoint.objects.create(run=run, step=1),
        location=bucket.location,
        path="llm/llama/step-1",
        format="pytorch_dcp",
        state="complete",
        verification="verified",
        verification_basis="source",
        verified_at=NOW,
    )
    copy = api_copies(signed_in)["llama"]
    assert (copy["verification"], copy["verification_basis"], copy["verified_at"]) == (
        "verified",
        "source",
        "2026-11-21T12:00:00Z",
    )
    schema = signed_in.get("/api/v1/schema/", HTTP_ACCEPT="application/json").content.decode()
    for word in ("verification_basis", "verified_at", "disputed", "storage_class", "location_tier"):
        assert word in schema, word
