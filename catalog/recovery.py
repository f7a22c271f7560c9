"""The on-call recovery view's reasoning: what to restore a run from, from where, how long it takes, and how.

For a run it finds the checkpoint to restore (``newest_restorable``: complete and verified, failing
that the newest complete one, with the reason it is not verified), ranks every copy of it by the
estimated time to get its bytes back, writes the commands that do it with the real paths, and lists
the next-best checkpoints as fallbacks. Everything is read from copies and ``CopyTierUsage`` in a
fixed number of queries, whatever the size of the run.

Restore time of one copy = the longest first-byte delay among the storage classes its bytes sit in
(an archive restore) + the sum over those classes of bytes / the class's throughput. The
assumptions are shown on the page; ``CKPTFLEET_RESTORE_ASSUMPTIONS`` overrides them per tier.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Q

from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run
from catalog.selectors import NEWEST_STEP_FIRST, newest_restorable
from fleet.choices import LocationKind, Tier
from fleet.models import Bucket
from fleet.restore_assumptions import DEFAULT_ASSUMPTIONS

MIB = 1024 * 1024
FALLBACKS = 3

ARCHIVE_TIERS = {Tier.ARCHIVE, Tier.DEEP_ARCHIVE}


@dataclass(frozen=True)
class Assumption:
    tier: str
    label: str
    mib_per_s: float
    delay_s: int
    basis: str


def assumptions() -> dict[str, Assumption]:
    """The restore assumptions in force: the defaults, overridden per tier by settings."""
    overrides = getattr(settings, "RESTORE_ASSUMPTIONS", {}) or {}
    result = {}
    for tier in Tier:
        merged = {**DEFAULT_ASSUMPTIONS[tier], **overrides.get(tier.value, {})}
        result[tier.value] = Assumption(
            tier=tier.value,
            label=tier.label,
            mib_per_s=float(merged["mib_per_s"]),
            delay_s=int(merged["delay_s"]),
            basis=str(merged.get("basis", "")) + (" (overridden in settings)" if tier.value in overrides else ""),
        )
    return result


@dataclass
class Part:
    tier: str
    storage_class: str
    bytes: int

    @property
    def label(self) -> str:
        return Tier(self.tier).label if self.tier in Tier.values else self.tier


@dataclass
class RankedCopy:
    copy: CheckpointCopy
    parts: list[Part]
    usable: bool
    delay_s: int = 0
    transfer_s: float = 0.0
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.delay_s + self.transfer_s

    @property
    def archived(self) -> bool:
        return any(p.tier in ARCHIVE_TIERS for p in self.parts)

    @property
    def verified(self) -> bool:
        return self.copy.verification == Verification.VERIFIED


@dataclass
class Fallback:
    checkpoint: Checkpoint
    verified: bool
    best: RankedCopy | None


@dataclass
class Recovery:
    run: Run
    checkpoint: Checkpoint | None
    verified: bool
    copies: list[RankedCopy]
    unusable: list[RankedCopy]
    fallbacks: list[Fallback]
    newer_broken: list[Checkpoint]
    warnings: list[str]
    assumptions: dict[str, Assumption]

    @property
    def best(self) -> RankedCopy | None:
        return self.copies[0] if self.copies else None


def _parts(copies: list[CheckpointCopy]) -> dict[int, list[Part]]:
    parts: dict[int, list[Part]] = {c.pk: [] for c in copies}
    for copy_id, tier, storage_class, size in CopyTierUsage.objects.filter(copy__in=[c.pk for c in copies]).values_list(
        "copy_id", "tier", "storage_class", "bytes"
    ):
        parts[copy_id].append(Part(tier, storage_class, size))
    for copy in copies:
        if not parts[copy.pk]:  # not rolled up yet: the whole copy at the location's tier
            parts[copy.pk] = [Part(copy.location.tier, "", copy.bytes)]
    return parts


def _buckets(copies: list[CheckpointCopy]) -> dict[int, Bucket]:
    ids = {c.location_id for c in copies if c.location.kind == LocationKind.BUCKET}
    return {b.location_id: b for b in Bucket.objects.filter(location_id__in=ids)} if ids else {}


def _join(root: str, path: str) -> str:
    return root.rstrip("/") + "/" + path.lstrip("/")


def restore_commands(copy: CheckpointCopy, parts: list[Part], bucket: Bucket | None, *, single_file: bool) -> list[str]:
    """Shell commands that bring this copy back into ``./<name>``, with the real host, paths, bucket and keys."""
    name = copy.path.rstrip("/").rsplit("/", 1)[-1] or "checkpoint"
    if bucket is None:
        host = copy.location.host.name if copy.location.host_id else "HOST"
        source = _join(copy.location.root_path, copy.path)
        if single_file:
            return [f"rsync -a --partial --info=progress2 {shlex.quote(f'{host}:{source}')} ./"]
        return [f"rsync -a --partial --info=progress2 {shlex.quote(f'{host}:{source}/')} {shlex.quote(f'./{name}/')}"]
    prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
    key = prefix + copy.path.strip("/")
    endpoint = f" --endpoint-url {shlex.quote(bucket.endpoint_url)}" if bucket.endpoint_url else ""
    commands = []
    archived = any(p.tier in ARCHIVE_TIERS for p in parts)
    if archived:
        tier = "Standard"
        listing = (
            f"aws s3api list-objects-v2{endpoint} --bucket {shlex.quote(bucket.bucket_name)}"
            f" --prefix {shlex.quote(key if single_file else key + '/')} --query 'Contents[].Key' --output text"
        )
        request = '{"Days":7,"GlacierJobParameters":{"Tier":"' + tier + '"}}'
        commands.append(
            f"{listing} | tr '\\t' '\\n' | xargs -I KEY aws s3api restore-object{endpoint}"
            f" --bucket {shlex.quote(bucket.bucket_name)} --key KEY --restore-request {shlex.quote(request)}"
        )
    force = " --force-glacier-transfer" if archived else ""
    source = f"s3://{bucket.bucket_name}/{key}"
    if single_file:
        commands.append(f"aws s3 cp{endpoint}{force} {shlex.quote(source)} ./")
    else:
        commands.append(
            f"aws s3 cp{endpoint}{force} --recursive {shlex.quote(source + '/')} {shlex.quote(f'./{name}/')}"
        )
    return commands


def _rank(copies, parts, buckets, table) -> list[RankedCopy]:
    ranked = []
    for copy in copies:
        own = parts[copy.pk]
        item = RankedCopy(copy=copy, parts=own, usable=copy.state == CopyState.COMPLETE)
        for part in own:
            assumption = table.get(part.tier) or table[Tier.OBJECT_STANDARD]
            item.delay_s = max(item.delay_s, assumption.delay_s)
            item.transfer_s += part.bytes / (assumption.mib_per_s * MIB)
        single = copy.file_count <= 1 and "." in copy.path.rsplit("/", 1)[-1]
        item.commands = restore_commands(copy, own, buckets.get(copy.location_id), single_file=single)
        if item.archived:
            item.notes.append("Archived: request the restore first, then copy once it is available.")
        if not item.verified:
            item.notes.append(
                "Checksums disagree with another copy or the writer's record."
                if copy.verification == Verification.MISMATCH
                else "No checksum evidence: complete by its manifest, content not confirmed."
            )
        ranked.append(item)
    # Usable first, then verified, then the fastest; the location name keeps the order stable.
    ranked.sort(key=lambda r: (not r.usable, not r.verified, r.seconds, r.copy.location.name))
    return ranked


def _present(checkpoint_ids) -> list[CheckpointCopy]:
    return list(
        CheckpointCopy.objects.filter(checkpoint_id__in=list(checkpoint_ids), gone_at__isnull=True)
        .select_related("location", "location__host")
        .order_by("location__name", "path")
    )


def recovery_for(run: Run) -> Recovery:
    """Everything the recovery page shows for ``run``, in a fixed number of queries."""
    table = assumptions()
    checkpoint, verified = newest_restorable(run)
    warnings: list[str] = []
    newer_broken: list[Checkpoint] = []
    if checkpoint is None:
        return Recovery(
            run, None, False, [], [], [], [], ["No present copy of any checkpoint of this run is complete."], table
        )
    # Older checkpoints that are restorable, newest first: the fallbacks.
    complete = Q(copies__gone_at__isnull=True, copies__state=CopyState.COMPLETE)
    older = Checkpoint.objects.filter(complete, run=run).exclude(pk=checkpoint.pk)
    if checkpoint.step is not None:
        older = older.filter(Q(step__lt=checkpoint.step) | Q(step__isnull=True))
        newer_broken = list(
            Checkpoint.objects.filter(run=run, step__gt=checkpoint.step, copies__gone_at__isnull=True)
            .distinct()
            .order_by(NEWEST_STEP_FIRST)[:5]
        )
    fallbacks = list(older.distinct().order_by(NEWEST_STEP_FIRST, "tag")[:FALLBACKS])
    copies = _present([checkpoint.pk] + [f.pk for f in fallbacks])
    parts = _parts(copies)
    buckets = _buckets(copies)
    ranked = _rank(copies, parts, buckets, table)
    mine = [r for r in ranked if r.copy.checkpoint_id == checkpoint.pk]
    if not verified:
        warnings.append(
            f"{checkpoint.label} is the newest checkpoint with a complete copy, but no copy of it is verified: its "
            "files match its manifest, their content has not been confirmed by checksums."
        )
    if newer_broken:
        labels = ", ".join(c.label for c in newer_broken)
        warnings.append(f"Newer checkpoints exist ({labels}), but none of their present copies is restorable.")
    result_fallbacks = []
    for f in fallbacks:
        theirs = [r for r in ranked if r.copy.checkpoint_id == f.pk and r.usable]
        result_fallbacks.append(Fallback(f, any(r.verified for r in theirs), theirs[0] if theirs else None))
    return Recovery(
        run=run,
        checkpoint=checkpoint,
        verified=verified,
        copies=[r for r in mine if r.usable],
        unusable=[r for r in mine if not r.usable],
        fallbacks=result_fallbacks,
        newer_broken=newer_broken,
        warnings=warnings,
        assumptions=table,
    )


def seconds_text(seconds: float) -> str:
    """A restore estimate for people: '≈ 4 min', '≈ 5 h 12 min', 'under 1 s'."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 60:
        return f"≈ {round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"≈ {minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"≈ {hours} h {minutes} min" if minutes else f"≈ {hours} h"
