"""The on-call recovery view's reasoning: what to restore a run from, from where, how long it takes, and how.

The rule of what may be restored lives here, once (``restorable_copies``): a present, complete copy that
is not a left-over of an interrupted save and that nothing says is wrong, i.e. verified or unverified;
never a disputed copy (copies disagree and nothing independent says which is right, PRODUCT.md promise
10) nor one whose checksums disagree. The run's newest restorable checkpoint (``newest_restorable``) is
the newest with a verified such copy; failing that the newest with an unverified one, with the reason it
is not verified. Promise 5, retention, the deletion preview and the placement flags all mean this one.

For a run it finds that checkpoint, ranks every copy of it by the estimated time to get its bytes back
(verified first), writes the commands that do it with the real paths, says which newer checkpoints were
skipped and why (a disputed one with what would settle it), and lists the next-best checkpoints as
fallbacks. Everything is read from copies and ``CopyTierUsage`` in a fixed number of queries, whatever
the size of the run.

Restore time of one copy = the longest first-byte delay among the storage classes its bytes sit in
(an archive restore) + the sum over those classes of bytes / the class's throughput. The
assumptions are shown on the page; ``CKPTFLEET_RESTORE_ASSUMPTIONS`` overrides them per tier.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, RestoreDrill, Run
from fleet.choices import LocationKind, Tier
from fleet.models import Bucket
from fleet.restore_assumptions import DEFAULT_ASSUMPTIONS

MIB = 1024 * 1024
FALLBACKS = 3
SKIPPED_SHOWN = 5  # newer checkpoints named with why they were passed over

ARCHIVE_TIERS = {Tier.ARCHIVE, Tier.DEEP_ARCHIVE}

# What a copy's verification may be for it to be restored from: nothing says its content is wrong.
TRUSTED = (Verification.VERIFIED, Verification.UNVERIFIED)


# --- the rule ---------------------------------------------------------------------------------------


def restorable_copies(prefix: str = "") -> Q:
    """The copies a run may be restored from, as a filter on copies (``prefix``: the path to them, e.g.
    ``"copies__"`` from checkpoints; pass it in one ``filter()`` so every condition holds for one copy)."""
    return Q(
        **{
            f"{prefix}gone_at__isnull": True,
            f"{prefix}state": CopyState.COMPLETE,
            f"{prefix}temporary": False,
            f"{prefix}verification__in": TRUSTED,
        }
    )


def is_restorable(copy: CheckpointCopy) -> bool:
    """``restorable_copies`` for one loaded copy."""
    return (
        copy.gone_at is None
        and copy.state == CopyState.COMPLETE
        and not copy.temporary
        and copy.verification in TRUSTED
    )


def restorable_key(step: int | None, tag: str, verification: str) -> tuple:
    """How restorable copies rank their checkpoints, best first when sorted in reverse: verified first, then
    the higher step, then a stepped checkpoint before a step-less export, then the greater tag."""
    return (verification == Verification.VERIFIED, step is not None, step or 0, tag)


def newest_restorable(run: Run) -> tuple[Checkpoint | None, bool]:
    """The run's newest restorable checkpoint whatever the health of the hosts holding it, and whether a copy of it
    is verified; ``(None, False)`` when no copy of the run is restorable. What promise 5 and retention protect: a
    host that is down still holds its files. What to restore from *now* also needs a reachable copy: the recovery
    model (``catalog.recovery_model``) adds that. Two queries at most, each stopping at its first hit."""
    checkpoints = Checkpoint.objects.filter(run=run)
    verified = restorable_copies("copies__") & Q(copies__verification=Verification.VERIFIED)
    found = _newest_of(checkpoints.filter(verified))
    if found is not None:
        return found, True
    return _newest_of(checkpoints.filter(restorable_copies("copies__"))), False


def _fallbacks(run: Run, checkpoint: Checkpoint, now: datetime) -> list[Checkpoint]:
    """The FALLBACKS checkpoints before ``checkpoint`` with a restorable copy at a reachable location, in the order
    ``NEWEST_STEP_FIRST, "tag"``: the lower steps through the (run, step) index backwards, stopping at the
    FALLBACKS-th, then the step-less ones by tag. A DISTINCT over the run's copies sorted every checkpoint of the run
    (15 ms for a run of 5,000)."""
    restorable = Exists(
        CheckpointCopy.objects.filter(restorable_copies(), reachable_copies(now), checkpoint=OuterRef("pk"))
    )
    older = Checkpoint.objects.filter(restorable, run=run).exclude(pk=checkpoint.pk)
    found: list[Checkpoint] = []
    if checkpoint.step is not None:
        found = list(older.filter(step__lt=checkpoint.step).order_by("-step", "tag")[:FALLBACKS])
    # Asked whether or not the stepped ones filled the list: the same queries for every run.
    unstepped = list(older.filter(step__isnull=True).order_by("tag")[:FALLBACKS])
    return (found + unstepped)[:FALLBACKS]


def _newest_of(checkpoints) -> Checkpoint | None:
    """The first of ``checkpoints`` in the order ``NEWEST_STEP_FIRST, "-tag"``: the highest step, walking the
    (run, step) index backwards and stopping at the first that qualifies, else the greatest tag of the step-less
    ones; ordering by ``step DESC NULLS LAST`` sorted every checkpoint of the run (30 ms for a run of 5,000)."""
    stepped = checkpoints.filter(step__isnull=False).order_by("-step").first()
    return stepped if stepped is not None else checkpoints.filter(step__isnull=True).order_by("-tag").first()


def newest_restorable_ids(run_ids: Iterable[int], *, excluding: Iterable[int] = ()) -> dict[int, tuple[int, bool]]:
    """{run id: (checkpoint id, verified)} for many runs in one query, by the rule of ``newest_restorable``;
    ``excluding`` copies are left out (what a deletion would leave)."""
    rows = (
        CheckpointCopy.objects.filter(restorable_copies(), checkpoint__run_id__in=list(run_ids))
        .exclude(pk__in=list(excluding))
        .values_list("checkpoint__run_id", "checkpoint_id", "checkpoint__step", "checkpoint__tag", "verification")
        .distinct()
    )
    best: dict[int, tuple] = {}
    for run_id, checkpoint_id, step, tag, verification in rows:
        key = restorable_key(step, tag, verification)
        if run_id not in best or key > best[run_id][0]:
            best[run_id] = (key, checkpoint_id)
    return {run_id: (checkpoint_id, key[0]) for run_id, (key, checkpoint_id) in best.items()}


def disputed_checkpoints() -> Q:
    """Checkpoints with a present disputed copy (a filter on checkpoints): no policy deletes or demotes them
    (promise 12), and recovery skips them when no other copy is restorable."""
    return Q(
        Exists(
            CheckpointCopy.objects.filter(
                checkpoint=OuterRef("pk"), gone_at__isnull=True, verification=Verification.DISPUTED
            )
        )
    )


def settle_hint(copy: CheckpointCopy) -> str:
    """What would settle a disputed copy: the last of its verification reasons (``catalog.verification``)."""
    reasons = copy.verification_reasons or []
    return reasons[-1] if reasons else ""


@dataclass(frozen=True)
class Assumption:
    tier: str
    label: str
    mib_per_s: float
    delay_s: int
    basis: str


def measured_mib_per_s(*, now=None) -> dict[str, tuple[float, int]]:
    """{tier: (median MiB/s, drills)} of the restore drills that passed within RESTORE_DRILL_MEASURE_DAYS
    (``catalog.drills``): measured throughput, which beats an assumed one."""
    since = (now or timezone.now()) - timedelta(days=settings.RESTORE_DRILL_MEASURE_DAYS)
    by_tier: dict[str, list[float]] = {}
    rows = RestoreDrill.objects.filter(outcome=RestoreDrill.Outcome.PASSED, started_at__gte=since, bytes__gt=0)
    for tier, nbytes, seconds in rows.values_list("tier", "bytes", "seconds"):
        if seconds > 0:
            by_tier.setdefault(tier, []).append(nbytes / MIB / seconds)
    return {tier: (statistics.median(values), len(values)) for tier, values in by_tier.items()}


def failed_drills(copy_ids) -> dict[int, RestoreDrill]:
    """{copy id: its latest drill} for the copies among ``copy_ids`` whose latest restore drill failed."""
    latest: dict[int, RestoreDrill] = {}
    for row in RestoreDrill.objects.filter(copy_id__in=list(copy_ids)).order_by("copy_id", "-started_at", "-pk"):
        latest.setdefault(row.copy_id, row)
    return {cid: row for cid, row in latest.items() if row.outcome == RestoreDrill.Outcome.FAILED}


def assumptions() -> dict[str, Assumption]:
    """The restore assumptions in force: the defaults, overridden per tier by settings, and replaced by what
    restore drills measured where they did (the basis says which)."""
    overrides = settings.RESTORE_ASSUMPTIONS
    measured = measured_mib_per_s()
    result = {}
    for tier in Tier:
        merged = {**DEFAULT_ASSUMPTIONS[tier], **overrides.get(tier.value, {})}
        basis = str(merged.get("basis", "")) + (" (overridden in settings)" if tier.value in overrides else "")
        mib_per_s = float(merged["mib_per_s"])
        if tier.value in measured:
            speed, drills = measured[tier.value]
            basis = (
                f"measured: the median of {drills} restore drill{'s' if drills != 1 else ''} in the last "
                f"{settings.RESTORE_DRILL_MEASURE_DAYS} days (assumed {mib_per_s:g} MiB/s before)"
            )
            mib_per_s = max(speed, 0.001)
        result[tier.value] = Assumption(
            tier=tier.value,
            label=tier.label,
            mib_per_s=mib_per_s,
            delay_s=int(merged["delay_s"]),
            basis=basis,
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
    unreachable: str = ""  # why it is not offered as the restore source: its host is down or silent
    evidence: str = ""  # how fresh what is known about it is: the agent's last call, the last inventory or scan

    @property
    def seconds(self) -> float:
        return self.delay_s + self.transfer_s

    @property
    def archived(self) -> bool:
        return any(p.tier in ARCHIVE_TIERS for p in self.parts)

    @property
    def verified(self) -> bool:
        return self.copy.verification == Verification.VERIFIED

    @property
    def why(self) -> list[str]:
        """Why it cannot be restored from: its reasons, then its verification's, each once."""
        seen: dict[str, None] = {}
        for reason in [*(self.copy.reasons or []), *(self.copy.verification_reasons or [])]:
            seen.setdefault(reason, None)
        return list(seen)


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
    skipped: list[Skipped] = field(default_factory=list)
    unreachable: list[RankedCopy] = field(default_factory=list)  # restorable, but on a host that is down or silent

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


DISPUTED_NOTE = (
    "Disputed: its checksums differ from another copy's and nothing independent says which is right, so it is "
    "not offered for restore."
)
MISMATCH_NOTE = "Checksums disagree with another copy or the writer's record: not offered for restore."


def _note(copy: CheckpointCopy) -> str:
    """Why a copy is not verified, in one line for the on-call engineer; '' for a verified copy."""
    if copy.verification == Verification.VERIFIED:
        return ""
    if copy.verification == Verification.DISPUTED:
        hint = settle_hint(copy)
        return f"{DISPUTED_NOTE} {hint[:1].upper()}{hint[1:]}." if hint else DISPUTED_NOTE
    if copy.verification == Verification.MISMATCH:
        return MISMATCH_NOTE
    why = "; ".join(copy.verification_reasons or [])
    return f"Unverified: {why}." if why else "Unverified: complete by its manifest, content not confirmed by checksums."


def _ago(when, now) -> str:
    if when is None:
        return "never"
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 90:
        return "just now"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min ago"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} d ago"


def evidence_of(location, now) -> str:
    """How fresh the evidence about ``location`` is, in words: the agent's last call and the last inventory."""
    applied = _ago(location.last_applied_at, now)
    if location.host_id is None:
        return f"last scan applied {applied}"
    return f"agent last seen {_ago(location.host.last_seen_at, now)}, last inventory applied {applied}"


def unreachable_reason(location, now) -> str:
    """Why copies at ``location`` are not offered as the restore source ('' when they may be): its host was marked
    down by an operator, or its agent has been silent for longer than ``HOST_SILENT_MINUTES``."""
    host = location.host if location.host_id else None
    if host is None:
        return ""
    if host.down_since is not None:
        return (
            f"host {host.name} is marked down by {host.down_label} ({_ago(host.down_since, now)}): {host.down_reason}"
        )
    silent = timedelta(minutes=settings.HOST_SILENT_MINUTES)
    # A host never seen has no copies but through a path that did not go through its agent: nothing to judge.
    if host.last_seen_at is not None and now - host.last_seen_at > silent:
        return (
            f"host {host.name} has not reported for over {settings.HOST_SILENT_MINUTES} min (agent last seen "
            f"{_ago(host.last_seen_at, now)}): the run may have died with it"
        )
    return ""


def reachable_copies(now: datetime) -> Q:
    """``unreachable_reason``'s rule as a filter on copies: the copies that may be the restore source at ``now``,
    because no host holds them (a bucket), or their host is not marked down and its agent has reported within
    ``HOST_SILENT_MINUTES`` (or never: nothing to judge), and their latest restore drill did not fail
    (``failed_drills``). The recovery model (``catalog.recovery_model``) picks the checkpoint with it; ``_rank``
    says why each copy it leaves out is left out."""
    silent_before = now - timedelta(minutes=settings.HOST_SILENT_MINUTES)
    healthy = Q(location__host__isnull=True) | Q(
        Q(location__host__last_seen_at__isnull=True) | Q(location__host__last_seen_at__gte=silent_before),
        location__host__down_since__isnull=True,
    )
    later = RestoreDrill.objects.filter(copy=OuterRef("copy")).filter(
        Q(started_at__gt=OuterRef("started_at")) | Q(started_at=OuterRef("started_at"), pk__gt=OuterRef("pk"))
    )
    failed_last = RestoreDrill.objects.filter(copy=OuterRef("pk"), outcome=RestoreDrill.Outcome.FAILED).filter(
        ~Exists(later)
    )
    return healthy & ~Q(Exists(failed_last))


def _rank(copies, parts, buckets, table, now: datetime) -> list[RankedCopy]:
    ranked = []
    drills = failed_drills([c.pk for c in copies])
    for copy in copies:
        own = parts[copy.pk]
        item = RankedCopy(copy=copy, parts=own, usable=is_restorable(copy))
        item.unreachable = unreachable_reason(copy.location, now)
        if copy.pk in drills and not item.unreachable:
            failed = drills[copy.pk]
            item.unreachable = f"its restore drill of {failed.started_at:%Y-%m-%d %H:%M} UTC failed: {failed.detail}"
        item.evidence = evidence_of(copy.location, now)
        for part in own:
            assumption = table.get(part.tier) or table[Tier.OBJECT_STANDARD]
            item.delay_s = max(item.delay_s, assumption.delay_s)
            item.transfer_s += part.bytes / (assumption.mib_per_s * MIB)
        single = copy.file_count <= 1 and "." in copy.path.rsplit("/", 1)[-1]
        if item.usable:  # a copy not offered for restore gets no command to restore it with
            item.commands = restore_commands(copy, own, buckets.get(copy.location_id), single_file=single)
        if item.archived:
            item.notes.append("Archived: request the restore first, then copy once it is available.")
        if note := _note(copy):
            item.notes.append(note)
        ranked.append(item)
    # Usable first, then reachable, then verified, then the fastest; the location name keeps the order stable.
    ranked.sort(key=lambda r: (not r.usable, bool(r.unreachable), not r.verified, r.seconds, r.copy.location.name))
    return ranked


def _present(checkpoint_ids) -> list[CheckpointCopy]:
    return list(
        CheckpointCopy.objects.filter(checkpoint_id__in=list(checkpoint_ids), gone_at__isnull=True)
        .select_related("location", "location__host", "checkpoint")
        .order_by("location__name", "path")
    )


@dataclass
class Skipped:
    """A checkpoint newer than the one to restore, and why it is not the one: ``kind`` is ``unreachable`` (restorable,
    but every such copy is on a host that is down or silent, or its restore drill failed), ``unverified``
    (restorable, but an older one is verified), ``disputed``, ``interrupted`` (nothing but a left-over of its save)
    or ``broken`` (no complete copy to trust)."""

    checkpoint: Checkpoint
    kind: str
    why: str


def skipped_newer(checkpoints: list[Checkpoint], copies: list[CheckpointCopy], *, now: datetime) -> list[Skipped]:
    """Why each of ``checkpoints`` (newer than the one the recovery model chose) is passed over, from its present
    ``copies``: the recovery model's reasons (``catalog.recovery_model``), shown by every surface that shows it."""
    by_checkpoint: dict[int, list[CheckpointCopy]] = {c.pk: [] for c in checkpoints}
    for copy in copies:
        if copy.checkpoint_id in by_checkpoint:
            by_checkpoint[copy.checkpoint_id].append(copy)
    drills = failed_drills([c.pk for c in copies if is_restorable(c)])

    def reason(copy: CheckpointCopy) -> str:
        if why := unreachable_reason(copy.location, now):
            return why
        return (
            f"its restore drill of {drills[copy.pk].started_at:%Y-%m-%d %H:%M} UTC failed" if copy.pk in drills else ""
        )

    out = []
    for checkpoint in checkpoints:
        own = by_checkpoint[checkpoint.pk]
        restorable = [c for c in own if is_restorable(c)]
        away = [reason(c) for c in restorable]
        disputed = [c for c in own if c.verification == Verification.DISPUTED and c.state == CopyState.COMPLETE]
        if restorable and all(away):
            why = f"{checkpoint.label} is newer and complete, but not reachable: {away[0]}."
            out.append(Skipped(checkpoint, "unreachable", why))
        elif restorable:
            why = (
                f"{checkpoint.label} is newer and complete, but no copy of it is verified: the checkpoint above is "
                "the newest whose content checksums confirm it."
            )
            out.append(Skipped(checkpoint, "unverified", why))
        elif disputed:
            first = disputed[0]
            dispute = (first.verification_reasons or ["its copies disagree"])[0]
            hint = settle_hint(first)
            why = (
                f"{checkpoint.label} is skipped: it is disputed ({dispute}). Its copies are neither trusted nor "
                f"condemned until something independent decides" + (f"; {hint}." if hint and hint != dispute else ".")
            )
            out.append(Skipped(checkpoint, "disputed", why))
        elif own and all(c.temporary for c in own):
            why = f"{checkpoint.label}: its save was interrupted; only a left-over of it is on disk"
            out.append(Skipped(checkpoint, "interrupted", why))
        else:
            out.append(Skipped(checkpoint, "broken", f"{checkpoint.label}: none of its present copies is complete"))
    return out


def _skipped_lines(skipped: list[Skipped]) -> list[str]:
    lines = [s.why for s in skipped if s.kind not in ("broken", "interrupted")]
    broken = [s.checkpoint.label for s in skipped if s.kind in ("broken", "interrupted")]
    if broken:
        lines.append(f"Newer checkpoints exist ({', '.join(broken)}), but none of their present copies is restorable.")
    return lines


def recovery_for(
    run: Run, *, checkpoint: Checkpoint | None, verified: bool, skipped: list[Skipped], now: datetime
) -> Recovery:
    """Everything the recovery page shows for ``run``, in a fixed number of queries: the checkpoint the run's
    recovery model chose (``checkpoint``, ``verified`` and the newer ones it passed over, ``skipped``, from
    ``catalog.recovery_model``; the page, both recovery-point APIs, the resume answer and the ladder read the same
    one), its copies ranked, and the fallbacks."""
    table = assumptions()
    newer = [s.checkpoint for s in skipped]
    newer_broken = [s.checkpoint for s in skipped if s.kind not in ("unverified", "unreachable")]
    if checkpoint is None:
        copies = _present([c.pk for c in newer])
        ranked = _rank(copies, _parts(copies), _buckets(copies), table, now)
        warnings = ["No present copy of any checkpoint of this run is restorable from a reachable location."] + [
            s.why for s in skipped if s.kind in ("disputed", "unreachable")
        ]
        away = [r for r in ranked if r.usable and r.unreachable]
        return Recovery(run, None, False, [], [], [], newer_broken, warnings, table, skipped, away)
    fallbacks = _fallbacks(run, checkpoint, now)
    copies = _present([checkpoint.pk] + [f.pk for f in fallbacks] + [n.pk for n in newer])
    ranked = _rank(copies, _parts(copies), _buckets(copies), table, now)
    mine = [r for r in ranked if r.copy.checkpoint_id == checkpoint.pk]
    warnings: list[str] = []
    if not verified:
        best = next((r.copy for r in mine if r.usable and not r.unreachable), None)
        why = "; ".join(best.verification_reasons or []) if best is not None else ""
        warnings.append(
            f"{checkpoint.label} is the newest checkpoint with a complete copy that nothing says is wrong, but no "
            "copy of it is verified: its files match its manifest, their content has not been confirmed by "
            "checksums" + (f" ({why})." if why else ".")
        )
    warnings += _skipped_lines(skipped)
    result_fallbacks = []
    for f in fallbacks:
        theirs = [r for r in ranked if r.copy.checkpoint_id == f.pk and r.usable and not r.unreachable]
        result_fallbacks.append(Fallback(f, any(r.verified for r in theirs), theirs[0] if theirs else None))
    newer_ids = {n.pk for n in newer}
    # The restorable copies left out: of this checkpoint, and of the newer ones the model passed over for it.
    away = [r for r in ranked if r.usable and r.unreachable and r.copy.checkpoint_id in newer_ids | {checkpoint.pk}]
    return Recovery(
        run=run,
        checkpoint=checkpoint,
        verified=verified,
        copies=[r for r in mine if r.usable and not r.unreachable],
        unreachable=away,
        unusable=[r for r in mine if not r.usable],
        fallbacks=result_fallbacks,
        newer_broken=newer_broken,
        warnings=warnings,
        assumptions=table,
        skipped=skipped,
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
