"""Restore drills: read a sample of trusted checkpoints back from object storage and check them, on a schedule.

A checkpoint is written once and read only in a disaster; a drill is the rehearsal. Every day (beat,
``catalog.tasks.run_restore_drills``) each team gets ``RESTORE_DRILL_PER_TEAM`` drills: its newest restorable
checkpoint and others not drilled for the longest time. For each, the coldest copy in object storage that is
not in an archive class (GLACIER, DEEP_ARCHIVE: a restore there takes hours and is billed) is read back with
GetObject, file by file up to ``RESTORE_DRILL_MAX_BYTES``, and every byte is checked against the checksum
recorded for the file (the agent's sha256, S3's stored checksum, a single-part ETag's MD5, or a multipart
object's composite CRC), and its size. The outcome, files, bytes and seconds are kept (``RestoreDrill``).

What drills change:

- **Estimates.** A tier with passed drills in the last ``RESTORE_DRILL_MEASURE_DAYS`` days is estimated at the
  median throughput they measured, and the page says "measured" (``catalog.recovery.assumptions``).
- **Ranking.** A copy whose latest drill failed (bytes that do not match, or a file that is gone) is not offered
  for restore, with the drill's finding shown, until a later drill of it passes.

Copies on hosts are not drilled here: the host's agent re-reads them (``--scrub``) and reports what it finds.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import zlib
from datetime import datetime

from awscrt import checksums as crt
from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from catalog import digests as digest_rules
from catalog.models import Checkpoint, CheckpointCopy, RestoreDrill, ShardFile, Team
from catalog.recovery import restorable_copies
from fleet.choices import LocationKind, Tier
from fleet.models import Bucket
from fleet.s3 import RESTORE_CLASSES, S3Error, client_for, describe

log = logging.getLogger(__name__)

TIER_ORDER = tuple(Tier.values)  # hottest first
CHUNK = 1 << 20


def _key(bucket: Bucket, path: str) -> str:
    prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
    return prefix + path


class _Hasher:
    """The digests a file has recorded, computed over its bytes as they stream past."""

    def __init__(self, algos: set[str], composite: dict | None) -> None:
        self.algos = algos
        self.sha256 = hashlib.sha256() if "sha256" in algos else None
        self.sha1 = hashlib.sha1(usedforsecurity=False) if "sha1" in algos else None
        self.md5 = hashlib.md5(usedforsecurity=False) if "md5" in algos else None
        self.crc32 = 0
        self.crc32c = 0
        self.crc64 = 0
        self.composite = composite
        self.part_crcs: list[int] = []
        self.part_crc = 0
        self.part_left = int(composite.get("part_size") or 0) if composite else 0
        self.size = 0

    def update(self, data: bytes) -> None:
        self.size += len(data)
        for h in (self.sha256, self.sha1, self.md5):
            if h is not None:
                h.update(data)
        if "crc32" in self.algos:
            self.crc32 = zlib.crc32(data, self.crc32)
        if "crc32c" in self.algos:
            self.crc32c = crt.crc32c(data, self.crc32c)
        if "crc64nvme" in self.algos:
            self.crc64 = crt.crc64nvme(data, self.crc64)
        if self.composite and self.part_left:
            algo = self.composite["algo"]
            view = memoryview(data)
            while view:
                take = view[: self.part_left]
                self.part_crc = _crc_update(algo, take, self.part_crc)
                self.part_left -= len(take)
                view = view[len(take) :]
                if self.part_left == 0:
                    self.part_crcs.append(self.part_crc)
                    self.part_crc, self.part_left = 0, int(self.composite["part_size"])

    def digest(self, algo: str) -> str:
        if algo == "sha256" and self.sha256 is not None:
            return self.sha256.hexdigest()
        if algo == "sha1" and self.sha1 is not None:
            return self.sha1.hexdigest()
        if algo == "md5" and self.md5 is not None:
            return self.md5.hexdigest()
        if algo == "crc32":
            return f"{self.crc32:08x}"
        if algo == "crc32c":
            return f"{self.crc32c:08x}"
        if algo == "crc64nvme":
            return f"{self.crc64:016x}"
        raise ValueError(algo)

    def composite_digest(self) -> str:
        assert self.composite is not None
        crcs = list(self.part_crcs)
        if self.part_left != int(self.composite["part_size"]) or not crcs:
            crcs.append(self.part_crc)
        algo = self.composite["algo"]
        width = digest_rules.CRC_WIDTH[algo]
        joined = b"".join(c.to_bytes(width, "big") for c in crcs)
        value = digest_rules.crc(algo, joined)
        return f"{value:0{width * 2}x}"


def _crc_update(algo: str, data, previous: int) -> int:
    if algo == "crc32":
        return zlib.crc32(data, previous)
    if algo == "crc32c":
        return crt.crc32c(bytes(data), previous)
    return crt.crc64nvme(bytes(data), previous)


def _expected(sf: ShardFile) -> tuple[dict[str, str], dict | None]:
    recorded = digest_rules.loads(sf.digests)
    full = digest_rules.full_digests(sf.checksum_algo, sf.checksum, recorded)
    composite = recorded.get("composite")
    usable = (
        composite
        if isinstance(composite, dict)
        and composite.get("algo") in digest_rules.CRC_WIDTH
        and int(composite.get("part_size") or 0) > 0
        else None
    )
    return full, usable


def _check_file(client, bucket: Bucket, sf: ShardFile, copy_path_prefix: str) -> tuple[str, int]:
    """'' when the object read back matches its recorded size and checksums, else the finding; and bytes read."""
    full, composite = _expected(sf)
    key = _key(bucket, sf.path)
    algos = set(full)
    hasher = _Hasher(algos, composite)
    try:
        extra = {"VersionId": sf.version_id} if sf.version_id else {}
        answer = client.get_object(Bucket=bucket.bucket_name, Key=key, **extra)
        body = answer["Body"]
        try:
            for chunk in body.iter_chunks(CHUNK):
                hasher.update(chunk)
        finally:
            body.close()
    except Exception as exc:
        err = describe(exc, f"GetObject of s3://{bucket.bucket_name}/{key}") if not isinstance(exc, S3Error) else exc
        return f"{sf.path}: {err}", hasher.size
    name = sf.path[len(copy_path_prefix) :] if sf.path.startswith(copy_path_prefix) else sf.path
    if hasher.size != sf.size:
        return f"{name}: read back {hasher.size:,} bytes, the catalog recorded {sf.size:,}", hasher.size
    for algo in sorted(full, key=list(digest_rules.FULL_ALGOS).index):  # the strongest first, for the finding
        want = full[algo]
        got = hasher.digest(algo)
        if got != want.lower():
            return f"{name}: {algo} of the bytes read back is {got}, the recorded one {want.lower()}", hasher.size
    if composite and not full:
        got = hasher.composite_digest()
        if got != str(composite.get("value", "")).lower():
            return f"{name}: composite {composite['algo']} is {got}, the recorded one {composite['value']}", hasher.size
    return "", hasher.size


def _checkable(sf: ShardFile) -> bool:
    full, composite = _expected(sf)
    return bool(full or composite)


def drill(copy: CheckpointCopy, *, max_bytes: int | None = None, now: datetime | None = None) -> RestoreDrill:
    """Read ``copy``'s files back (smallest first, up to ``max_bytes``) and check each; record the outcome."""
    max_bytes = settings.RESTORE_DRILL_MAX_BYTES if max_bytes is None else max_bytes
    started = now or timezone.now()
    bucket = Bucket.objects.get(location_id=copy.location_id)
    files = list(ShardFile.objects.filter(copy=copy, gone_at__isnull=True).order_by("size", "path"))
    classes = {sf.storage_class.upper() for sf in files if sf.storage_class}
    drill_row = RestoreDrill(
        team=copy.checkpoint.run.team,
        checkpoint=copy.checkpoint,
        copy=copy,
        tier=copy.location.tier,
        storage_class=",".join(sorted(classes)),
        started_at=started,
        finished_at=started,
        outcome=RestoreDrill.Outcome.PASSED,
    )
    checkable = [sf for sf in files if _checkable(sf)]
    if not checkable:
        drill_row.outcome = RestoreDrill.Outcome.ERROR
        drill_row.detail = "no file of this copy has a recorded checksum to check the bytes against"
        drill_row.save()
        return drill_row
    prefix = copy.path.rstrip("/") + "/"
    t0 = time.monotonic()
    chosen, budget = [], max_bytes
    for sf in checkable:
        if chosen and sf.size > budget:
            break
        chosen.append(sf)
        budget -= sf.size
    client = client_for(bucket)
    for sf in chosen:
        finding, read = _check_file(client, bucket, sf, prefix)
        drill_row.files += 1
        drill_row.bytes += read
        if finding:
            failed = "GetObject" not in finding or "NoSuchKey" in finding or "404" in finding
            drill_row.outcome = RestoreDrill.Outcome.FAILED if failed else RestoreDrill.Outcome.ERROR
            drill_row.detail = finding
            break
    drill_row.seconds = max(time.monotonic() - t0, 1e-6)
    drill_row.finished_at = timezone.now()
    if drill_row.outcome == RestoreDrill.Outcome.PASSED:
        skipped = len(files) - len(chosen)
        drill_row.detail = f"{drill_row.files:,} file(s) read back and matched" + (
            f"; {skipped:,} not read (over the drill's byte budget or no recorded checksum)" if skipped else ""
        )
    drill_row.save()
    log.info("restore drill of copy %s: %s (%s)", copy.pk, drill_row.outcome, drill_row.detail)
    return drill_row


def _drillable(copy: CheckpointCopy) -> bool:
    if copy.location.kind != LocationKind.BUCKET:
        return False
    classes = set(
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True).values_list("storage_class", flat=True).distinct()
    )
    return not ({c.upper() for c in classes} & RESTORE_CLASSES)


def _coldest(copies: list[CheckpointCopy]) -> CheckpointCopy | None:
    def rank(c: CheckpointCopy) -> int:
        return TIER_ORDER.index(c.location.tier) if c.location.tier in TIER_ORDER else -1

    for copy in sorted(copies, key=rank, reverse=True):
        if _drillable(copy):
            return copy
    return None


def pick(*, per_team: int | None = None, now: datetime | None = None, rng: random.Random | None = None) -> list:
    """The copies to drill now: per team, its newest restorable checkpoint, then the ones drilled longest ago."""
    per_team = settings.RESTORE_DRILL_PER_TEAM if per_team is None else per_team
    rng = rng or random.Random()
    picked: list[CheckpointCopy] = []
    for team in Team.objects.order_by("name"):
        checkpoints = list(
            Checkpoint.objects.filter(restorable_copies("copies__"), run__team=team, copies__location__kind="bucket")
            .annotate(last_drill=Max("drills__started_at"))
            .distinct()
            .order_by("-step")[:500]
        )
        if not checkpoints:
            continue
        newest, rest = checkpoints[0], checkpoints[1:]
        rng.shuffle(rest)
        rest.sort(key=lambda c: (c.last_drill is not None, c.last_drill or now))
        for checkpoint in [newest, *rest]:
            if len([p for p in picked if p.checkpoint.run.team_id == team.pk]) >= per_team:
                break
            copies = list(
                CheckpointCopy.objects.filter(restorable_copies(), checkpoint=checkpoint)
                .select_related("location", "checkpoint__run__team")
                .order_by("pk")
            )
            copy = _coldest(copies)
            if copy is not None:
                picked.append(copy)
    return picked


def run_drills(*, now: datetime | None = None) -> list[RestoreDrill]:
    """One round: pick and drill. Each drill is its own row; one failing drill does not stop the others."""
    return [drill(copy, now=now) for copy in pick(now=now)]
