"""Write a demo fleet in real checkpoint layouts and ingest it, so every page has something true to show.

    manage.py seed_demo                                       # idempotent: re-running changes nothing
    manage.py seed_demo --reset                               # rebuild the demo trees from scratch
    manage.py seed_demo --s3-endpoint http://127.0.0.1:5055   # also demo buckets (or CKPTFLEET_DEMO_S3)

The checkpoint trees are copies of the ones under demo/trees/ (DEMO_TREES), written by the real
libraries (torch.distributed.checkpoint, huggingface_hub, ...), spread over several hosts and
broken the way real ones break: a rank that never finished writing, a truncated safetensors shard,
an interrupted save's temporary directory, a missing DeepSpeed data-parallel rank, a flipped bit in
one of the two host copies of an export (disputed: nothing says which copy is right). Each host's
roots are walked by the real agent code, with checksums (sha256, CRC32 and block CRCs), and ingested
through the same service as an upload.

With an S3 endpoint (``make demo`` starts moto's server on 127.0.0.1), two buckets in two regions
hold copies of the same runs, uploaded the way a copy job would (one with SHA256 checksums, one with
boto3's default CRC32): copies that agree with the hosts' (verified), one with a flipped byte, written
after the hosts' checksums were taken (so the source's checksum settles it: that copy is corrupt), objects in
archive storage classes, files of no checkpoint, an interrupted save's temporary directory and an
incomplete multipart upload. They are registered with ``ingest.scan.bucket_add`` and scanned
through ``scan_start`` and ``scan_run``, as a worker would. An endpoint that forgets everything on
restart (moto keeps it in memory) is filled again; one that still holds the objects is left as it is.

So that money reads as money, a fifth host (gpu-c12) holds production-shaped runs, a Llama-3-70B in
pretraining and a Llama-2-7B fine-tune that finished weeks ago: real DCP manifests (demo/scale) beside
sparse shard files of hundreds of GB, walked by the agent without content checksums. Their older steps
are in a third bucket (ckpt-prod-us), tiered by age into Standard, Glacier Instant Retrieval and Deep
Archive, scanned from an S3 Inventory report the command writes (only the manifests are real objects).
Every demo file's time is spread over the past weeks, and ``usage_backfill`` estimates the usage of the
last ``HISTORY_DAYS`` from those times, so last month has spend too (marked as estimated on the pages).
"""

from __future__ import annotations

import csv
import fnmatch
import gzip
import io
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from access.roles import Role
from actions import services as actions
from actions.models import DeletionJob, Hold, Pin
from audit.actor import Actor
from audit.anchors import FileAnchorStore, anchor_write
from audit.choices import EventSource, VerificationTrigger
from audit.verify import verify_and_record
from catalog.models import Checkpoint, Team
from ckptfleet.errors import DomainError
from fleet import agent
from fleet.choices import InventoryStatus
from fleet.models import Bucket, Host, Inventory, MultipartUpload, StorageLocation
from fleet.pricebook import utc_today
from fleet.services import host_register, inventory_receive, location_add, location_record_filesystem
from ingest import inventory as ingest
from ingest.scan import bucket_add, scan_run, scan_start
from spend.backfill import usage_backfill

# The real checkpoint trees the demo copies (demo/README.md); the tests read them from here too. Not under
# tests/: the image ships this folder, and .dockerignore leaves tests/ out.
DEMO_TREES = Path(settings.BASE_DIR) / "demo" / "trees"
DAY = 86400

# host -> (site, region, [(root name, kind, tier, [(fixture subtree, destination below root)])])
DEMO_HOSTS = {
    "gpu-a01": ("dc1", "eu-west", [("nvme0", "nvme", "nvme", [("nvme-a/llm", "llm"), ("nvme-a/vision", "vision")])]),
    "gpu-a02": ("dc1", "eu-west", [("nvme0", "nvme", "nvme", [("nvme-a/llm", "llm")])]),
    "gpu-b07": ("dc2", "us-east", [("nvme0", "nvme", "nvme", [("bucket/vision", "vision"), ("pfs/nlp", "nlp")])]),
    "lustre-gw1": (
        "dc1",
        "eu-west",
        [("lustre", "pfs", "pfs", [("pfs/llm", "llm"), ("pfs/speech", "speech"), ("pfs/nlp", "nlp")])],
    ),
}
# Production-shaped runs (demo/scale, written by demo/make_trees.py): one real DCP manifest per model, put
# into each step folder beside shard files made sparse at the sizes it names, so they take no disk. The
# host's roots are walked without content checksums (reading terabytes of zeros would take hours): its
# copies are complete by their manifest and unverified, as on a fleet whose agents skip --checksums.
DEMO_SCALE = Path(settings.BASE_DIR) / "demo" / "scale"
SCALE_HOST = ("gpu-c12", "dc2", "us-east", "nvme0")
# What each root's file system would hold on real hardware, as its agent would measure it (statvfs): GPU hosts
# carry 7.68 TB NVMe drives (U.2 data-centre size; as many as the checkpoints need), a Lustre gateway a 2 PB file
# system; the share in use, as on a busy fleet. The agent run by the seed measures the demo directory's own
# disk; these replace it through the same service the ingest uses.
NVME_DRIVE_BYTES = 7_680_000_000_000
FS_DEMO = {"gpu-a01": 0.72, "gpu-a02": 0.61, "gpu-b07": 0.84, "lustre-gw1": 0.67, "gpu-c12": 0.78}


def demo_filesystem(host_name: str, kind: str, held: int) -> tuple[int, int]:
    """The (size, free) bytes a demo root's file system would have on real hardware (``FS_DEMO``): NVMe drives
    enough to hold ``held`` under 85 %, or a 2 PB Lustre; used never less than what it holds."""
    if kind == "pfs":
        size = 2 * 10**15
    else:
        drives = max(1, -(-int(held / 0.85) // NVME_DRIVE_BYTES))
        size = drives * NVME_DRIVE_BYTES
    used = max(int(size * FS_DEMO.get(host_name, 0.7)), held)
    return size, size - used


@dataclass(frozen=True)
class ScaleRun:
    """A production-shaped run: its manifest under demo/scale, where it lives, and when its steps were saved."""

    model: str  # demo/scale/<model>/.metadata
    path: str  # team/run below the roots
    nvme: tuple[int, ...]  # steps on the scale host's NVMe
    bucket: tuple[int, ...]  # steps in the production bucket
    step_every: int  # steps between two checkpoints
    days_per_checkpoint: float
    last_saved_days_ago: float = 0  # a finished run saved its last checkpoint that long ago

    def saved(self, step: int, now: float) -> float:
        """When ``step`` was saved, in epoch seconds: older steps earlier, one checkpoint per interval."""
        newest = max(self.nvme + self.bucket)
        behind = (newest - step) / self.step_every * self.days_per_checkpoint
        return now - (self.last_saved_days_ago + behind) * DAY


SCALE_RUNS = (
    # Pretraining, still running: a checkpoint every 2 days; the NVMe keeps every second one and the newest
    # four (dormant checkpoints piling up on the priciest tier), the bucket has them all but the newest.
    ScaleRun(
        "llama3-70b",
        "llm/llama3-70b",
        nvme=(*range(16000, 38000, 2000), 38000, 39000, 40000, 41000),
        bucket=tuple(range(12000, 41000, 1000)),
        step_every=1000,
        days_per_checkpoint=2,
    ),
    # A fine-tune that finished five weeks ago and is still on the GPU host's NVMe.
    ScaleRun(
        "llama2-7b",
        "nlp/llama2-7b-sft",
        nvme=tuple(range(500, 3500, 500)),
        bucket=tuple(range(500, 3500, 500)),
        step_every=500,
        days_per_checkpoint=4,
        last_saved_days_ago=35,
    ),
)
HISTORY_DAYS = 75  # how far back the demo's files reach, and what usage_backfill estimates
STEP_SPACING = 2 * DAY  # the demo's checkpoints are saved this far apart, older steps earlier

# Files a writer finishes last: uploaded last too, as a copy job that follows the save would.
MANIFESTS = frozenset(
    {
        ".metadata",
        "trainer_state.json",
        "latest",
        "_CHECKPOINT_METADATA",
        "model.safetensors.index.json",
        "latest_checkpointed_iteration.txt",
        "ckptfleet.json",
        "integrity.json",
        "metadata.json",
    }
)
COST_CENTERS = {
    "llm": "CC-4100 Foundation models",
    "vision": "CC-4200 Perception",
    "nlp": "CC-4300 Language",
    "speech": "CC-4400 Speech",
}


def _age_tree(root: Path, newest: float, spacing: float = STEP_SPACING) -> None:
    """Give each checkpoint directory a plausible save time, older steps earlier (``spacing`` apart, so the
    fleet's history reaches back weeks, as ``usage_backfill`` reads it), files before manifests."""
    dirs = sorted({p.parent for p in root.rglob("*") if p.is_file()}, key=lambda d: str(d))
    for index, directory in enumerate(reversed(dirs)):
        saved = newest - index * spacing
        for file in sorted(directory.iterdir()):
            if file.is_file():
                late = file.name in {
                    ".metadata",
                    "trainer_state.json",
                    "latest",
                    "_CHECKPOINT_METADATA",
                    "model.safetensors.index.json",
                    "latest_checkpointed_iteration.txt",
                }
                stamp = saved + (30 if late else 0)
                os.utime(file, (stamp, stamp))


def _scale_tree(root: Path, newest: float) -> None:
    """The production-shaped runs on the scale host: per step, the model's real DCP manifest and its shard
    files, sparse, at the least size the manifest gives (read by the agent's own reader), saved when
    ``ScaleRun.saved`` says, the manifest 30 s after the shards as DCP's coordinator writes it."""
    for run in SCALE_RUNS:
        manifest = DEMO_SCALE / run.model / ".metadata"
        facts = agent.file_facts(str(manifest)) or {}
        if "files" not in facts:
            raise CommandError(f"{manifest} gives no shard sizes: {facts.get('error', 'no facts')}")
        for step in run.nvme:
            directory = root / run.path / f"step-{step}"
            directory.mkdir(parents=True, exist_ok=True)
            saved = run.saved(step, newest)
            for name, size in facts["files"].items():
                with (directory / name).open("wb") as shard:
                    shard.truncate(size)  # a hole: no block is written
                os.utime(directory / name, (saved, saved))
            shutil.copyfile(manifest, directory / ".metadata")
            os.utime(directory / ".metadata", (saved + 30, saved + 30))


def _break_things(host: str, root: Path) -> None:
    """Damage copies the way real saves fail, so the triage pages have real work."""
    if host == "gpu-a01":
        run = root / "llm" / "llama-tiny"
        # A job killed while the ranks were writing: step-300 has rank 0's file but no rank 1 and no .metadata.
        src = run / "step-100"
        dst = run / "step-300"
        shutil.copytree(src, dst)
        ranks = sorted(dst.glob("__1_*.distcp"))
        for extra in ranks:
            extra.unlink()
        # An interrupted save left its metadata temp file behind in step-400.
        tmp = run / "step-400"
        shutil.copytree(src, tmp)
        (tmp / ".metadata").rename(tmp / ".metadata.tmp")
    if host == "gpu-b07":
        # A bit flipped in tensor data of the final export on one of its two hosts: the header still reads
        # right, both copies are complete, and nothing independent says which is right: disputed.
        shard = root / "nlp" / "gpt2-tiny" / "model-00001-of-00002.safetensors"
        if shard.exists():
            data = shard.read_bytes()
            shard.write_bytes(_flip(data))
    if host == "lustre-gw1":
        nlp = root / "nlp" / "gpt2-tiny"
        shards = sorted(nlp.glob("checkpoint-*/model-*.safetensors"))
        if shards:
            with shards[-1].open("r+b") as fh:  # a copy cut short by a full disk
                fh.truncate(max(0, shards[-1].stat().st_size - 64))
        # An older Megatron save whose second tensor-parallel rank was cut short when the file system filled:
        # its only copy, so nothing disputes it: the format's own check (the zip's end record) says corrupt.
        rank = root / "llm" / "gpt-megatron" / "iter_0000200" / "mp_rank_01" / "model_optim_rng.pt"
        if rank.exists():
            with rank.open("r+b") as fh:
                fh.truncate(max(0, rank.stat().st_size // 2))
        speech = root / "speech" / "ds-tiny"
        steps = sorted(speech.glob("global_step*"))
        if steps:
            optim = sorted(steps[-1].glob("*zero_pp_rank_0_*optim_states.pt"))
            for f in optim:
                f.unlink()


# --- demo buckets -------------------------------------------------------------------------------

DEMO_S3_CREDENTIALS = "demo-s3"  # a JSON file in CKPTFLEET_S3_SECRETS_DIR: moto takes any keys
DEMO_S3_KEYS = {"aws_access_key_id": "demo", "aws_secret_access_key": "demo-secret-for-the-local-endpoint"}
MIB = 1024 * 1024


@dataclass(frozen=True)
class DemoBucket:
    """A demo bucket: fixture trees below its prefix, storage classes by glob, and what is wrong in it."""

    location: str
    bucket: str
    region: str
    prefix: str
    trees: tuple[tuple[str, str], ...]  # (fixture tree, destination below the prefix)
    classes: tuple[tuple[str, str], ...] = ()  # (glob of the path below the prefix, storage class); first match
    flipped: tuple[str, ...] = ()  # paths whose middle byte is flipped: same size, other content
    extra: tuple[tuple[str, str], ...] = ()  # (path, fixture file) copies, e.g. an interrupted save
    orphans: tuple[tuple[str, int], ...] = ()  # (path, size) of files that belong to no checkpoint
    multipart: tuple[str, ...] = ()  # paths of uploads started and never completed
    exclude: tuple[str, ...] = ()  # globs of fixture paths the copy job left out
    # The checksum asked for on upload: "" is boto3's default (CRC32 since boto3 1.36), as most copy jobs get.
    checksum: str = "SHA256"


DEMO_BUCKETS = (
    DemoBucket(
        location="s3:ckpt-demo-eu",
        bucket="ckpt-demo-eu",
        region="eu-west-1",
        prefix="fleet/",
        # The runs of gpu-a01 and gpu-a02, copied by a job that also copied a save still being written.
        trees=(("nvme-a", ""),),
        flipped=("llm/llama-tiny/step-100/__1_0.distcp",),
        extra=(
            ("llm/llama-tiny/step-500/__0_0.distcp", "nvme-a/llm/llama-tiny/step-100/__0_0.distcp"),
            ("llm/llama-tiny/step-500/__1_0.distcp", "nvme-a/llm/llama-tiny/step-100/__1_0.distcp"),
            ("llm/llama-tiny/step-500/.metadata.tmp", "nvme-a/llm/llama-tiny/step-100/.metadata"),
        ),
        orphans=(
            ("scratch/llama-export-2025-10/part-00000.bin", 3 * MIB),
            ("scratch/llama-export-2025-10/part-00001.bin", 3 * MIB),
            ("scratch/llama-export-2025-10/_SUCCESS", 0),
        ),
        multipart=("llm/llama-tiny/step-600/__0_0.distcp",),
        classes=(("vision/resnet-tiny/epoch=0-step=100.ckpt", "STANDARD_IA"),),
    ),
    DemoBucket(
        location="s3:ckpt-demo-us",
        bucket="ckpt-demo-us",
        region="us-east-1",
        prefix="",
        # The runs of lustre-gw1 and gpu-b07, older steps tiered down to archive classes.
        trees=(("pfs", ""), ("bucket", "")),
        # gpt2-tiny's final export stays on the hosts only: two copies, one damaged, nothing to tell which.
        exclude=("nlp/gpt2-tiny/model*", "nlp/gpt2-tiny/config.json"),
        checksum="",
        classes=(
            ("speech/ds-tiny/global_step100/*", "DEEP_ARCHIVE"),
            ("llm/gpt-megatron/iter_0000200/*", "GLACIER"),
            ("vision/vit-jax/400/*", "GLACIER_IR"),
        ),
        extra=(
            (
                "vision/vit-jax/600.orbax-checkpoint-tmp-1763700000/state/_METADATA",
                "bucket/vision/vit-jax/500/state/_METADATA",
            ),
            (
                "vision/vit-jax/600.orbax-checkpoint-tmp-1763700000/state/manifest.ocdbt",
                "bucket/vision/vit-jax/500/state/manifest.ocdbt",
            ),
        ),
    ),
)


# The production bucket: the scale runs' older steps, tiered by age. moto keeps objects in memory, so only the
# manifests are real objects; the bucket is scanned from an S3 Inventory report (the CSV format AWS documents:
# manifest.json, manifest.checksum and gzipped CSV data files) that lists every shard at its full size.
PROD_LOCATION = "s3:ckpt-prod-us"
PROD_BUCKET = "ckpt-prod-us"
PROD_REGION = "us-east-1"
REPORT_BUCKET = "ckpt-prod-inventory"
REPORT_PREFIX = "ckpt-prod-us/daily/"
REPORT_SCHEMA = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag", "StorageClass")
# Older steps sit in colder classes, as a lifecycle rule would have put them: (older than days, class).
PROD_CLASSES = ((40, "DEEP_ARCHIVE"), (20, "GLACIER_IR"))  # younger: STANDARD


@dataclass(frozen=True)
class ReportedObject:
    """One object of the production bucket as its inventory report lists it; ``body`` when it is real."""

    key: str
    size: int
    saved: float  # epoch seconds: its LastModified
    storage_class: str
    body: bytes | None = None


def prod_objects(newest: float) -> list[ReportedObject]:
    """The production bucket's objects: each scale run's bucket steps, uploaded an hour after their save."""
    out: list[ReportedObject] = []
    for run in SCALE_RUNS:
        manifest = (DEMO_SCALE / run.model / ".metadata").read_bytes()
        facts = agent.file_facts(str(DEMO_SCALE / run.model / ".metadata")) or {}
        for step in run.bucket:
            uploaded = run.saved(step, newest) + 3600
            age_days = (newest - uploaded) / DAY
            storage_class = next((c for older, c in PROD_CLASSES if age_days > older), "STANDARD")
            base = f"{run.path}/step-{step}/"
            for name, size in facts["files"].items():
                out.append(ReportedObject(base + name, size, uploaded, storage_class))
            out.append(ReportedObject(base + ".metadata", len(manifest), uploaded + 30, storage_class, manifest))
    return out


def _flip(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    return bytes(damaged)


def _filler(path: str, size: int) -> bytes:
    """Deterministic bytes for a file of no checkpoint, so a second seeding writes the same object."""
    seed = path.encode()
    block = (seed * (4096 // max(1, len(seed)) + 1))[:4096]
    return (block * (size // 4096 + 1))[:size]


class DemoS3:
    """Fills the demo buckets of one S3-compatible endpoint with boto3, idempotently."""

    def __init__(self, endpoint: str) -> None:
        import boto3
        from botocore.config import Config

        self.endpoint = endpoint
        self._clients: dict[str, Any] = {}
        self._boto3 = boto3
        self._config = Config(
            s3={"addressing_style": "path"}, retries={"mode": "standard", "total_max_attempts": 3}, connect_timeout=5
        )

    def client(self, region: str) -> Any:
        if region not in self._clients:
            self._clients[region] = self._boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=region,
                aws_access_key_id=DEMO_S3_KEYS["aws_access_key_id"],
                aws_secret_access_key=DEMO_S3_KEYS["aws_secret_access_key"],
                config=self._config,
            )
        return self._clients[region]

    def objects(self, demo: DemoBucket) -> list[tuple[str, bytes, str]]:
        """(key, body, storage class) of every object the bucket should hold, manifests of a directory last."""
        planned: list[tuple[tuple, str, bytes]] = []
        for tree, dest in demo.trees:
            root = DEMO_TREES / tree
            for file in root.rglob("*"):
                if file.is_file():
                    rel = (
                        (Path(dest) / file.relative_to(root)).as_posix() if dest else file.relative_to(root).as_posix()
                    )
                    if any(fnmatch.fnmatch(rel, pattern) for pattern in demo.exclude):
                        continue
                    body = file.read_bytes()
                    if rel in demo.flipped:
                        body = _flip(body)
                    planned.append(((file.name in MANIFESTS, file.stat().st_mtime_ns, rel), rel, body))
        for rel, fixture in demo.extra:
            name = rel.rsplit("/", 1)[-1]
            planned.append(((name in MANIFESTS, 0, rel), rel, (DEMO_TREES / fixture).read_bytes()))
        for rel, size in demo.orphans:
            planned.append(((False, 0, rel), rel, _filler(rel, size)))
        planned.sort(key=lambda item: item[0])
        out = []
        for _, rel, body in planned:
            storage_class = next((c for pattern, c in demo.classes if fnmatch.fnmatch(rel, pattern)), "STANDARD")
            out.append((demo.prefix + rel, body, storage_class))
        return out

    def fill(self, demo: DemoBucket) -> tuple[int, int]:
        """Create the bucket and the objects it lacks; return (objects written, uploads started)."""
        from botocore.exceptions import ClientError

        client = self.client(demo.region)
        try:
            client.head_bucket(Bucket=demo.bucket)
        except ClientError:
            kwargs: dict[str, Any] = {"Bucket": demo.bucket}
            if demo.region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": demo.region}
            client.create_bucket(**kwargs)
        present = set()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=demo.bucket):
            present.update(item["Key"] for item in page.get("Contents", ()))
        written = 0
        for key, body, storage_class in self.objects(demo):
            if key in present:
                continue  # already there: rewriting it would change its LastModified and the next scan
            extra = {"ChecksumAlgorithm": demo.checksum} if demo.checksum else {}
            client.put_object(Bucket=demo.bucket, Key=key, Body=body, StorageClass=storage_class, **extra)
            written += 1
        started = 0
        for rel in demo.multipart:
            key = demo.prefix + rel
            uploads = client.list_multipart_uploads(Bucket=demo.bucket, Prefix=key).get("Uploads", ())
            if any(u["Key"] == key for u in uploads):
                continue
            upload = client.create_multipart_upload(Bucket=demo.bucket, Key=key)
            client.upload_part(
                Bucket=demo.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=_filler(key, 2 * MIB)
            )
            started += 1
        return written, started

    def fill_reported(self, objects: list[ReportedObject], created: float) -> tuple[int, str]:
        """Put the real objects of the production bucket and write its inventory report; return (objects written,
        the report's manifest key). The report is written again on every seeding, as S3 writes one a day."""
        import hashlib

        from botocore.exceptions import ClientError

        client = self.client(PROD_REGION)
        for bucket in (PROD_BUCKET, REPORT_BUCKET):
            try:
                client.head_bucket(Bucket=bucket)
            except ClientError:
                client.create_bucket(Bucket=bucket)
        present = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=PROD_BUCKET):
            present.update({item["Key"]: item["ETag"].strip('"') for item in page.get("Contents", ())})
        written = 0
        for obj in objects:
            if obj.body is not None and obj.key not in present:
                put = client.put_object(Bucket=PROD_BUCKET, Key=obj.key, Body=obj.body, StorageClass=obj.storage_class)
                present[obj.key] = put["ETag"].strip('"')
                written += 1
        rows = io.StringIO()
        out = csv.writer(rows, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for obj in objects:
            # A shard's ETag as a multipart upload in 64 MiB parts gives it; a real object's as the store gave it.
            parts = -(-obj.size // (64 * MIB))
            etag = present.get(obj.key) or f"{hashlib.md5(obj.key.encode(), usedforsecurity=False).hexdigest()}-{parts}"
            modified = datetime.fromtimestamp(obj.saved, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            out.writerow([PROD_BUCKET, quote_plus(obj.key, safe="/"), obj.size, modified, etag, obj.storage_class])
        data = gzip.compress(rows.getvalue().encode(), mtime=0)
        stamp = datetime.fromtimestamp(created, UTC)
        data_key = f"{REPORT_PREFIX}data/{hashlib.sha256(data).hexdigest()[:32]}.csv.gz"
        client.put_object(Bucket=REPORT_BUCKET, Key=data_key, Body=data)
        manifest = {
            "sourceBucket": PROD_BUCKET,
            "destinationBucket": f"arn:aws:s3:::{REPORT_BUCKET}",
            "version": "2016-11-30",
            "creationTimestamp": str(int(created * 1000)),
            "fileFormat": "CSV",
            "fileSchema": ", ".join(REPORT_SCHEMA),
            "files": [
                {
                    "key": data_key,
                    "size": len(data),
                    "MD5checksum": hashlib.md5(data, usedforsecurity=False).hexdigest(),
                }
            ],
        }
        body = json.dumps(manifest, indent=2).encode()
        folder = f"{REPORT_PREFIX}{stamp:%Y-%m-%dT%H-%MZ}/"
        client.put_object(Bucket=REPORT_BUCKET, Key=folder + "manifest.json", Body=body)
        checksum = hashlib.md5(body, usedforsecurity=False).hexdigest().encode()
        client.put_object(Bucket=REPORT_BUCKET, Key=folder + "manifest.checksum", Body=checksum)
        return written, folder + "manifest.json"


class Command(BaseCommand):
    help = "Create (or refresh) the demo fleet and a demo login."

    def add_arguments(self, parser):
        parser.add_argument("--reset", action="store_true", help="rebuild the demo trees from demo/trees")
        parser.add_argument("--dir", default=str(Path(settings.VAR_DIR) / "demo"), help="where the trees go")
        parser.add_argument(
            "--s3-endpoint",
            default=settings.DEMO_S3_ENDPOINT,
            metavar="URL",
            help="an S3-compatible endpoint for demo buckets, e.g. moto's server (default: $CKPTFLEET_DEMO_S3)",
        )

    def handle(self, *args, **opts):
        base = Path(opts["dir"]).resolve()
        if opts["reset"] and base.exists():
            shutil.rmtree(base)
        actor = Actor.command(label="manage.py seed_demo")
        for team, cc in COST_CENTERS.items():
            Team.objects.update_or_create(name=team, defaults={"cost_center": cc})
        now = time.time()
        for host_name, (site, region, roots) in DEMO_HOSTS.items():
            host = Host.objects.filter(name=host_name).first() or host_register(
                name=host_name, site=site, region=region, description="demo host", gpus=8, actor=actor
            )
            for root_name, kind, tier, trees in roots:
                root = base / host_name / root_name
                if not root.exists():
                    for subtree, dest in trees:
                        shutil.copytree(DEMO_TREES / subtree, root / dest)
                    _break_things(host_name, root)
                    _age_tree(root, now - 3600 - hash(host_name) % 7 * 3600)
                self._host_root(host, root_name, kind, tier, root, actor, checksums=True)
        host_name, site, region, root_name = SCALE_HOST
        host = Host.objects.filter(name=host_name).first() or host_register(
            name=host_name,
            site=site,
            region=region,
            description="demo host with production-sized runs (sparse shard files: no disk used)",
            gpus=8,
            actor=actor,
        )
        root = base / host_name / root_name
        if not root.exists():
            _scale_tree(root, now - 2 * 3600)
        self._host_root(host, root_name, "nvme", "nvme", root, actor, checksums=False)
        # The newest save on the host, as it was made: a second seeding gives the bucket the same times.
        first = SCALE_RUNS[0]
        newest = (root / first.path / f"step-{max(first.nvme)}" / ".metadata").stat().st_mtime - 30
        if opts["s3_endpoint"]:
            self._buckets(opts["s3_endpoint"].rstrip("/"), actor)
            self._prod_bucket(opts["s3_endpoint"].rstrip("/"), actor, newest)
        self._backfill(actor)
        self._demo_login()
        self._demo_actions()
        self._demo_acting()
        self._anchor_audit()

    def _host_root(
        self, host: Host, root_name: str, kind: str, tier: str, root: Path, actor: Actor, *, checksums: bool
    ) -> None:
        """Register a host's root as a location (once) and scan it with the real agent code."""
        location = StorageLocation.objects.filter(host=host, root_path=str(root)).first()
        if location is None:
            location_add(
                host=host, name=f"{host.name}:{root_name}", kind=kind, tier=tier, root_path=str(root), actor=actor
            )
        inventory = self._scan(host, root, checksums=checksums)
        self._filesystem(host, root, kind, inventory)
        self.stdout.write(
            f"{host.name}:{root}: {inventory.files_count} files, {inventory.checkpoints_found} checkpoint "
            f"copies ({inventory.status}{': ' + inventory.error if inventory.error else ''})"
            + ("" if checksums else ", scanned without content checksums")
        )

    def _filesystem(self, host: Host, root: Path, kind: str, inventory: Inventory) -> None:
        """Report the root's file system at a real size and fill (``FS_DEMO``), never less than what it holds."""
        location = StorageLocation.objects.get(host=host, root_path=str(root))
        held = inventory.bytes_total if inventory.status == "applied" else 0
        size, free = demo_filesystem(host.name, kind, held)
        location_record_filesystem(location=location, size_bytes=size, free_bytes=free, measured_at=timezone.now())

    def _prod_bucket(self, endpoint: str, actor: Actor, newest: float) -> None:
        """The production bucket: its manifests put, its inventory report written, and a scan that reads the
        report (``ingest.scan``), as a worker would for a bucket too large to list."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            written, manifest = DemoS3(endpoint).fill_reported(prod_objects(newest), created=time.time())
        except (BotoCoreError, ClientError) as exc:
            raise CommandError(f"the demo S3 endpoint {endpoint} did not take s3://{PROD_BUCKET}: {exc}") from None
        bucket = Bucket.objects.select_related("location").filter(location__name=PROD_LOCATION).first()
        if bucket is None:
            try:
                bucket = bucket_add(
                    name=PROD_LOCATION,
                    bucket_name=PROD_BUCKET,
                    endpoint_url=endpoint,
                    region_name=PROD_REGION,
                    addressing_style="path",
                    credentials=f"file:{DEMO_S3_CREDENTIALS}",
                    scan_every_minutes=0,
                    # Its shards exist only in the report: a HEAD of one would find nothing.
                    fetch_checksums=False,
                    inventory_report_uri=f"s3://{REPORT_BUCKET}/{REPORT_PREFIX}",
                    actor=actor,
                )
            except DomainError as exc:
                raise CommandError(f"cannot register the demo bucket {PROD_BUCKET}: {exc.message}") from None
        inventory = self._scan_bucket(bucket, actor)
        outcome = inventory.status if inventory.status != InventoryStatus.FAILED else f"failed: {inventory.error}"
        self.stdout.write(
            f"{PROD_LOCATION} (s3://{PROD_BUCKET}, {PROD_REGION}, from the inventory report s3://{REPORT_BUCKET}/"
            f"{manifest}; {written} manifest objects written): {inventory.files_count} objects, "
            f"{inventory.checkpoints_found} checkpoint copies ({outcome})"
        )

    def _backfill(self, actor: Actor) -> None:
        """Usage of the weeks before the first inventory, estimated from the files' times (``usage_backfill``)."""
        since = utc_today() - timedelta(days=HISTORY_DAYS)
        try:
            result = usage_backfill(since=since, actor=actor)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"usage since {since:%Y-%m-%d}: {result.days} location-days estimated from file modification times"
        )

    def _anchor_audit(self) -> None:
        """Anchor the trail in a signed file (var/audit-anchors in development) and verify it against the anchor, so
        the audit page shows both from the start; beat does the same on its schedule."""
        if not settings.AUDIT_ANCHOR_DIR:
            self.stdout.write("audit anchors: none written (CKPTFLEET_AUDIT_ANCHOR_DIR is not set)")
            return
        for anchor in anchor_write(stores=[FileAnchorStore(Path(settings.AUDIT_ANCHOR_DIR))]):
            self.stdout.write(f"audit anchor: event {anchor.count:,} in {anchor.location} ({anchor.outcome})")
        check = verify_and_record(trigger=VerificationTrigger.COMMAND)
        self.stdout.write(
            f"audit verification: {'intact' if check.ok else 'FAILED: ' + check.problem}, "
            f"{check.events_checked:,} events and {check.anchors_checked:,} anchors checked"
        )

    def _scan(self, host: Host, root: Path, *, checksums: bool = True):
        cache = agent.ChecksumCache(str(Path(settings.VAR_DIR) / "demo-checksums.sqlite3")) if checksums else None
        try:
            with tempfile.TemporaryFile() as body:
                agent.write_inventory(body, root=str(root), host=host.name, checksums=checksums, cache=cache)
                body.seek(0)
                inventory = inventory_receive(host=host, stream=body, content_encoding="gzip")
        finally:
            if cache is not None:
                cache.close()
        # Apply it now, so the command's output is the outcome; a worker that got there first wins the claim.
        ingest.ingest(inventory.pk)
        inventory.refresh_from_db()
        return inventory

    def _buckets(self, endpoint: str, actor: Actor) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self._secrets_file()
        demo_s3 = DemoS3(endpoint)
        for demo in DEMO_BUCKETS:
            try:
                written, started = demo_s3.fill(demo)
            except (BotoCoreError, ClientError) as exc:
                raise CommandError(f"the demo S3 endpoint {endpoint} did not take s3://{demo.bucket}: {exc}") from None
            if written or started:
                self.stdout.write(
                    f"s3://{demo.bucket}/{demo.prefix} ({demo.region}): wrote {written} objects"
                    + (f", started {started} multipart upload(s) left incomplete" if started else "")
                )
            bucket = self._register(demo, endpoint, actor)
            inventory = self._scan_bucket(bucket, actor)
            uploads = MultipartUpload.objects.filter(location=bucket.location, gone_at__isnull=True).count()
            outcome = inventory.status if inventory.status != InventoryStatus.FAILED else f"failed: {inventory.error}"
            self.stdout.write(
                f"{bucket.location.name} (s3://{demo.bucket}/{demo.prefix} at {bucket.endpoint_url}, {demo.region}): "
                f"{inventory.files_count} objects, {inventory.checkpoints_found} checkpoint copies, "
                f"{uploads} incomplete multipart upload(s) ({outcome}; "
                f"+{inventory.files_added} ~{inventory.files_changed} -{inventory.files_gone})"
            )
            if inventory.status == InventoryStatus.APPLIED and inventory.error:
                for line in inventory.error.splitlines():
                    self.stdout.write(f"    {line}")

    def _secrets_file(self) -> None:
        """The keys the workers use for the demo endpoint, as a ``file:`` credentials reference would name them."""
        directory = Path(settings.S3_SECRETS_DIR)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = directory / DEMO_S3_CREDENTIALS
        if not path.exists():
            path.write_text(json.dumps(DEMO_S3_KEYS, indent=2) + "\n")
            path.chmod(0o600)

    def _register(self, demo: DemoBucket, endpoint: str, actor: Actor) -> Bucket:
        bucket = Bucket.objects.select_related("location").filter(location__name=demo.location).first()
        if bucket is None:
            try:
                return bucket_add(
                    name=demo.location,
                    bucket_name=demo.bucket,
                    prefix=demo.prefix,
                    endpoint_url=endpoint,
                    region_name=demo.region,
                    addressing_style="path",
                    credentials=f"file:{DEMO_S3_CREDENTIALS}",
                    scan_every_minutes=0,  # the demo runs no beat: scans are on demand, from the fleet page
                    actor=actor,
                )
            except DomainError as exc:
                raise CommandError(f"cannot register the demo bucket {demo.bucket}: {exc.message}") from None
        if bucket.endpoint_url != endpoint:
            self.stderr.write(
                f"warning: {demo.location} is registered at {bucket.endpoint_url}, not {endpoint}; its scans go "
                "there (start the demo with the same S3_PORT, or use a fresh CKPTFLEET_VAR_DIR)"
            )
        return bucket

    def _scan_bucket(self, bucket: Bucket, actor: Actor) -> Inventory:
        try:
            inventory = scan_start(location=bucket.location, actor=actor)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        # Run it now, so the command's output is the outcome; a worker that got there first wins the claim.
        scan_run(inventory.pk)
        deadline = time.monotonic() + 300
        inventory.refresh_from_db()
        while inventory.status in (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING):
            if time.monotonic() > deadline:
                raise CommandError(f"scan {inventory.pk} of {bucket.location.name} is still {inventory.status}")
            time.sleep(0.2)
            inventory.refresh_from_db()
        return inventory

    def _demo_login(self) -> None:
        user_model = get_user_model()
        password_file = Path(settings.VAR_DIR) / "demo-password"
        if not password_file.exists():
            password_file.write_text(secrets.token_urlsafe(12))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        with transaction.atomic():
            user, _ = user_model.objects.get_or_create(username="demo", defaults={"email": "demo@example.com"})
            user.is_staff = True
            user.is_superuser = True
            user.set_password(password)
            user.save()
            user.groups.add(Group.objects.get_or_create(name=Role.ADMIN)[0])
            # One person per role, to see what each may do (access.roles); all share the demo password.
            for role in (Role.VIEWER, Role.FINANCE, Role.OPERATOR, Role.APPROVER):
                person, _ = user_model.objects.get_or_create(
                    username=f"demo-{role}", defaults={"email": f"demo-{role}@example.com"}
                )
                person.set_password(password)
                person.save()
                person.groups.set([Group.objects.get_or_create(name=role)[0]])
        self.stdout.write(
            f"demo logins: 'demo' (admin), 'demo-viewer', 'demo-finance', 'demo-operator', 'demo-approver'; "
            f"password in {password_file} ({password})"
        )

    def _demo_actions(self) -> None:
        """A demo hold, pin and scheduled deletion, through the services, once (by the demo operator)."""

        operator = get_user_model().objects.filter(username="demo-operator").first()
        if operator is None or Hold.objects.exists() or Pin.objects.exists() or DeletionJob.objects.exists():
            return
        actor = Actor.person(operator, EventSource.COMMAND)
        checkpoints = list(
            Checkpoint.objects.filter(copies__gone_at__isnull=True, copies__state="complete", step__isnull=False)
            .select_related("run__team")
            .distinct()
            .order_by("run_id", "-step")
        )
        by_run: dict[int, list] = {}
        scale = {run.path.rsplit("/", 1)[-1] for run in SCALE_RUNS}
        for ckpt in checkpoints:
            if ckpt.run.name not in scale:  # the demo's pin, hold and deletion stay on the small runs
                by_run.setdefault(ckpt.run_id, []).append(ckpt)
        runs = sorted(by_run.values(), key=len, reverse=True)
        if not runs or len(runs[0]) < 2:
            return
        newest, oldest = runs[0][0], runs[0][-1]
        held = runs[1][0] if len(runs) > 1 else newest
        try:
            actions.pin(checkpoint=newest, reason="demo: the checkpoint to restore from", actor=actor)
            actions.hold(
                run=held.run,
                checkpoint=held,
                reason="demo: evidence for an audit of the training data",
                case_ref="DEMO-LEGAL-1",
                actor=actor,
            )
            job = actions.schedule_deletion(checkpoint=oldest, reason="demo: superseded by newer steps", actor=actor)
        except DomainError as exc:
            self.stdout.write(f"demo actions stopped: {exc.message}")
            return
        self.stdout.write(
            f"demo actions: pinned {newest}, held {held} (case DEMO-LEGAL-1), deletion {job.pk} of {oldest}: "
            f"{job.get_state_display().lower()}"
        )

    def _demo_acting(self) -> None:
        """What acting on the waste looks like, through the services and by the demo's people, once each: runs
        that ended (one said by an operator, the idle ones inferred as beat does daily), a cost centre that
        changed this month, an orphan clean-up awaiting approval, and two tiering policies."""
        from actions.models import DeletionScope
        from actions.orphans import schedule_cleanup
        from catalog.lifecycle import run_status_set, runs_infer_ended
        from catalog.models import Run
        from catalog.selectors import orphans
        from catalog.teams import team_set_cost_center
        from fleet.pricebook import utc_today
        from retention import tiering_policies
        from retention.models import TieringPolicy

        users = {u.username: u for u in get_user_model().objects.filter(username__startswith="demo-")}
        if not {"demo-operator", "demo-finance", "demo-approver"} <= set(users):
            return
        operator = Actor.person(users["demo-operator"], EventSource.COMMAND)
        finance = Actor.person(users["demo-finance"], EventSource.COMMAND)
        approver = Actor.person(users["demo-approver"], EventSource.COMMAND)
        lines = []
        resnet = Run.objects.filter(team__name="vision", name="resnet-tiny").first()
        if resnet is not None and resnet.status == "active":
            run_status_set(
                run=resnet, status="finished", actor=operator, source="operator", reason="demo: training done"
            )
            lines.append("vision/resnet-tiny marked finished by demo-operator")
        ended = runs_infer_ended()
        if ended:
            names = ", ".join(str(r) for r in Run.objects.filter(pk__in=ended).select_related("team"))
            lines.append(f"inferred finished (no new checkpoint for weeks): {names}")
        nlp = Team.objects.filter(name="nlp").first()
        first = utc_today().replace(day=1)
        if nlp is not None and nlp.cost_center == COST_CENTERS["nlp"]:
            try:
                team_set_cost_center(
                    actor=finance,
                    team_id=nlp.pk,
                    cost_center="CC-4310 Language (after the reorg)",
                    effective_from=first,
                    reason="demo: the language team moved under applied research",
                )
                lines.append(f"team nlp billed to CC-4310 from {first}; earlier months keep CC-4300")
            except DomainError as exc:
                lines.append(f"cost centre not changed: {exc.message}")
        if not DeletionJob.objects.filter(scope=DeletionScope.ORPHANS).exists():
            group = next((g for g in orphans(kind="unclaimed") if g.host_id is None), None)
            if group is not None:
                try:
                    job = schedule_cleanup(
                        kind="unclaimed",
                        location=group.location_id,
                        prefix=group.prefix,
                        reason="demo: files of an export nobody claims",
                        actor=operator,
                    )
                    lines.append(
                        f"orphan clean-up {job.pk} at {group.location_name}: {job.get_state_display().lower()}"
                    )
                except DomainError as exc:
                    lines.append(f"orphan clean-up not scheduled: {exc.message}")
        if not TieringPolicy.objects.exists():
            free = tiering_policies.policy_create(
                actor=operator,
                name="Free NVMe once a verified object copy exists",
                action="free_host",
                source_tier="nvme",
                min_age_hours=24,
                every_hours=24,
                enabled=True,
                reason="demo: NVMe on the GPU hosts is the priciest tier",
            )
            from approvals.models import ChangeRequest
            from approvals.services import approve_change

            for change in ChangeRequest.objects.filter(target_type="tiering_policy", target_id=free.pk):
                approve_change(change=change, actor=approver)
            target = StorageLocation.objects.filter(name="s3:ckpt-demo-us").first()
            if target is not None:
                tiering_policies.policy_create(
                    actor=operator,
                    name="Ended runs to Glacier Instant Retrieval",
                    action="move",
                    target_location=target,
                    target_storage_class="GLACIER_IR",
                    run_ended_days=7,
                    reason="demo: ended runs are read only in a disaster",
                )
            lines.append("tiering policies: 'Free NVMe once a verified object copy exists' (enabled by demo-approver)")
        lines += self._demo_offload(operator)
        lines += self._demo_recovery_point(operator)
        for line in lines:
            self.stdout.write(f"demo: {line}")

    def _demo_offload(self, operator: Actor) -> list[str]:
        """An offload in progress: the finished vision/resnet-tiny asked off its GPU host's NVMe into a bucket, and
        the first of its files uploaded by the host's agent code (``push_file``, then the report an agent run makes),
        as if that run had been cut short: the job page shows it part done, awaiting the agent for the rest."""
        from catalog.lifecycle import run_status_set
        from catalog.models import CheckpointCopy, Run
        from promotion import pushes
        from promotion.choices import Direction
        from promotion.models import PromotionJob
        from promotion.moves import request_move

        if PromotionJob.objects.filter(direction=Direction.OFFLOAD).exists():
            return []
        target = StorageLocation.objects.filter(name="s3:ckpt-demo-eu").first()
        ds = Run.objects.filter(team__name="speech", name="ds-tiny").first()
        if target is None or ds is None:
            return []
        if ds.status == "active":
            run_status_set(run=ds, status="finished", actor=operator, source="operator", reason="demo: converged")
        # A small, complete checkpoint of several files on a host: one file goes now, the rest wait for the agent.
        source = (
            CheckpointCopy.objects.filter(
                checkpoint__run=ds,
                location__host__isnull=False,
                gone_at__isnull=True,
                state="complete",
                file_count__gte=2,
                bytes__lt=256 * MIB,
            )
            .select_related("location__host", "checkpoint__run__team")
            .order_by("checkpoint__step")
            .first()
        )
        if source is None:
            return []
        resnet = source.checkpoint
        try:
            jobs = request_move(
                checkpoints=[resnet],
                target_location=target,
                target_storage_class="STANDARD_IA",
                source_location=source.location,
                actor=operator,
                reason="demo: a finished run does not need the GPU host's NVMe",
            )
        except DomainError as exc:
            return [f"offload not requested: {exc.message}"]
        host = source.location.host
        listing = pushes.pending(host=host, root=source.location.root_path, limit=1)
        results = []
        conns = agent.StoreConnections(30.0)
        for item in listing.get("items", [])[:1]:
            try:
                result, detail, measured = agent.push_file(source.location.root_path, item, conns=conns, timeout=30.0)
            except Exception as exc:
                return [f"offload {jobs[0].pk} requested; its first upload failed: {exc}"]
            results.append({"id": item["id"], "result": result, "detail": detail, **measured})
        if results:
            pushes.report(host=host, results=results)
        job = PromotionJob.objects.get(pk=jobs[0].pk)
        rest = f" (the rest when `ckptfleet-agent --offloads` runs on {host.name})" if job.open else ""
        return [
            f"offload {job.pk} of {resnet} from {source.location.name} to {target.name}: "
            f"{job.get_state_display().lower()}, {job.items_done} of {job.items_total} files uploaded{rest}"
        ]

    def _demo_recovery_point(self, operator: Actor) -> list[str]:
        """A recovery point objective that the 70B pretraining run misses (it checkpoints every 2 days), its GPUs
        as an operator said them, and a fine-tune whose parent is another run's checkpoint."""
        from catalog.lineage import run_parent_set
        from catalog.models import Run
        from catalog.recovery_point import run_gpus_set, team_rpo_set

        lines = []
        llm = Team.objects.filter(name="llm").first()
        big = Run.objects.filter(team__name="llm", name="llama3-70b").first()
        if llm is not None and big is not None and llm.rpo_hours is None:
            team_rpo_set(team=llm, hours=1, actor=operator, reason="demo: a 512-GPU job may lose an hour at most")
            run_gpus_set(run=big, gpus=512, actor=operator, reason="demo: 64 nodes x 8 GPUs")
            lines.append("team llm: recovery point objective 1 h; llm/llama3-70b runs on 512 GPUs")
        sft = Run.objects.filter(team__name="nlp", name="llama2-7b-sft").first()
        base = Checkpoint.objects.filter(run__team__name="llm", run__name="llama-tiny", step=200).first()
        if sft is not None and base is not None and sft.parent_checkpoint_id is None:
            run_parent_set(run=sft, checkpoint_id=base.pk, actor=operator, reason="demo: fine-tuned from this step")
            lines.append(f"nlp/llama2-7b-sft started from {base}")
        return lines
