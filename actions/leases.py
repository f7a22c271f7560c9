"""Leases: a job says "I am using this checkpoint" for a while, and nothing deletes or demotes it meanwhile.

PRODUCT.md promise 11. A job that resumes from a checkpoint, evaluates or exports it takes a lease with an owner,
a purpose and a time to live (``LEASE_MIN_SECONDS`` to ``LEASE_MAX_SECONDS``), renews it while it works and
releases it when done; a lease that is not renewed lapses by itself at ``expires_at``. While one is live:

- ``actions.services.schedule_deletion`` refuses, naming the lease (``actions.promises.leased``), and a scheduled
  deletion re-checks it when it executes (``actions.execution.blocker``): the deletion waits, blocked, not failed;
- a move (demote or offload) leaves the checkpoint out and names the lease; retention and tiering policies do too.

Who may take one: a person with the operator role for a checkpoint of a team they may see, or a host (its agent,
with the host's token) for a checkpoint with a copy at one of its own locations. Each take, renewal, release and
lapse writes one audit event (``lease.take``, ``lease.renew``, ``lease.release``, ``lease.lapse``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from access.roles import Role, require_role
from access.scoping import may_see_run
from actions.models import Lease, LeasePurpose
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.models import Checkpoint
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.models import Host

MAX_OWNER = 200


def live(checkpoint_ids=None, *, now: datetime | None = None):
    """The live leases (not released, not expired), of some checkpoints or all."""
    rows = Lease.objects.filter(released_at__isnull=True, expires_at__gt=now or timezone.now())
    if checkpoint_ids is not None:
        rows = rows.filter(checkpoint_id__in=list(checkpoint_ids))
    return rows


def leased_ids(checkpoint_ids, *, now: datetime | None = None) -> set[int]:
    return set(live(checkpoint_ids, now=now).values_list("checkpoint_id", flat=True))


def describe(lease: Lease) -> str:
    return (
        f"lease {lease.pk} by {lease.owner} ({lease.get_purpose_display().lower()}, taken by {lease.taken_label}, "
        f"until {lease.expires_at:%Y-%m-%d %H:%M} UTC)"
    )


def _ttl(value) -> int:
    low, high = settings.LEASE_MIN_SECONDS, settings.LEASE_MAX_SECONDS
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        else:
            raise DomainError("ttl_seconds must be a whole number of seconds", code="bad_ttl")
    if not low <= value <= high:
        raise DomainError(
            f"ttl_seconds must be from {low:,} to {high:,} (a lease is renewed, not made long)", code="bad_ttl"
        )
    return value


def _who(actor: Actor, checkpoint: Checkpoint, host: Host | None, doing: str) -> None:
    """A person: the operator role and a team they may see. A host: a copy of the checkpoint at its locations."""
    if host is not None:
        if not checkpoint.copies.filter(location__host=host, gone_at__isnull=True).exists():
            raise PermissionRefused(
                f"host {host.name} holds no copy of {checkpoint}: a host leases only checkpoints it holds",
                code="not_this_host",
            )
        return
    if actor.kind == ActorKind.USER:
        require_role(actor.user, Role.OPERATOR, doing=doing, target_type="checkpoint", target_id=checkpoint.pk)
        if not may_see_run(actor.user, checkpoint.run):
            raise DomainError("no such checkpoint", code="not_found", http_status=404)


def _audit(lease: Lease, actor: Actor, action: str, *, before: dict | None, reason: str = "") -> None:
    audit(
        actor,
        action,
        target_type="checkpoint",
        target_id=lease.checkpoint_id,
        target_label=str(lease.checkpoint),
        reason=reason,
        before=before,
        after={
            "lease": lease.pk,
            "owner": lease.owner,
            "purpose": lease.purpose,
            "expires_at": lease.expires_at.isoformat(),
            "released": lease.released_at is not None,
        },
    )


def take(
    *, checkpoint: Checkpoint, owner: str, purpose: str, ttl_seconds, actor: Actor, host: Host | None = None
) -> Lease:
    owner = (owner or "").strip()
    if not owner:
        raise DomainError("name the lease's owner (the job or the person using the checkpoint)", code="bad_owner")
    if len(owner) > MAX_OWNER:
        raise DomainError(f"an owner is at most {MAX_OWNER} characters", code="bad_owner")
    if purpose not in LeasePurpose.values:
        raise DomainError(f"purpose must be one of {', '.join(LeasePurpose.values)}", code="bad_purpose")
    ttl = _ttl(ttl_seconds)
    _who(actor, checkpoint, host, "taking a lease")
    now = timezone.now()
    with transaction.atomic():
        # The checkpoint's row alone (of=self): locking the joined run and team too would make every lease of the
        # run wait for every other (docs/benchmarks.md, leases).
        checkpoint = (
            Checkpoint.objects.select_for_update(of=("self",), no_key=True)
            .select_related("run__team")
            .get(pk=checkpoint.pk)
        )
        lease = Lease.objects.create(
            checkpoint=checkpoint,
            owner=owner,
            purpose=purpose,
            taken_label=actor.label,
            taken_by=actor.user,
            host=host,
            taken_at=now,
            expires_at=now + timedelta(seconds=ttl),
        )
        _audit(lease, actor, "lease.take", before=None)
    return lease


def _lock(lease: Lease) -> Lease:
    return Lease.objects.select_for_update(of=("self",)).select_related("checkpoint__run__team").get(pk=lease.pk)


def _may_change(actor: Actor, lease: Lease, host: Host | None, doing: str) -> None:
    if host is not None:
        if lease.host_id != host.pk:
            raise PermissionRefused(f"lease {lease.pk} was not taken by host {host.name}", code="not_this_host")
        return
    _who(actor, lease.checkpoint, None, doing)


def renew(*, lease: Lease, ttl_seconds, actor: Actor, host: Host | None = None) -> Lease:
    """Move its expiry to now + ``ttl_seconds``; a released or lapsed lease cannot be renewed (take a new one)."""
    ttl = _ttl(ttl_seconds)
    now = timezone.now()
    with transaction.atomic():
        lease = _lock(lease)
        _may_change(actor, lease, host, "renewing a lease")
        if not lease.live_at(now):
            raise DomainError(f"lease {lease.pk} has ended ({_ended(lease)}): take a new one", code="lease_ended")
        before = {"expires_at": lease.expires_at.isoformat()}
        lease.expires_at, lease.renewed_at = now + timedelta(seconds=ttl), now
        lease.save(update_fields=["expires_at", "renewed_at"])
        _audit(lease, actor, "lease.renew", before=before)
    return lease


def release(*, lease: Lease, actor: Actor, host: Host | None = None, reason: str = "") -> Lease:
    """End it now. Releasing one that has already ended changes nothing."""
    now = timezone.now()
    with transaction.atomic():
        lease = _lock(lease)
        _may_change(actor, lease, host, "releasing a lease")
        if not lease.live_at(now):
            return lease
        lease.released_at, lease.released_label = now, actor.label
        lease.save(update_fields=["released_at", "released_label"])
        _audit(lease, actor, "lease.release", before={"released": False}, reason=(reason or "")[:2000])
    return lease


def _ended(lease: Lease) -> str:
    if lease.released_at is not None:
        return f"released by {lease.released_label}"
    return f"lapsed at {lease.expires_at:%Y-%m-%d %H:%M} UTC"


def record_lapses(*, now: datetime | None = None) -> int:
    """Write a ``lease.lapse`` event for each lease that expired unreleased (beat): it lapsed by itself at its
    expiry whatever this does; this only puts the fact in the audit trail."""
    now = now or timezone.now()
    actor = Actor.system("lease expiry")
    count = 0
    for pk in Lease.objects.filter(released_at__isnull=True, lapsed_at__isnull=True, expires_at__lte=now).values_list(
        "pk", flat=True
    )[:10_000]:
        with transaction.atomic():
            lease = Lease.objects.select_for_update(of=("self",)).select_related("checkpoint").get(pk=pk)
            if lease.lapsed_at is not None or lease.released_at is not None:
                continue
            lease.lapsed_at = now
            lease.save(update_fields=["lapsed_at"])
            _audit(lease, actor, "lease.lapse", before={"released": False})
            count += 1
    return count
