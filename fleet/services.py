"""Writes of the fleet domain: hosts, their tokens and locations, and receiving inventories."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import secrets
import zlib
from datetime import datetime
from typing import Any, BinaryIO

from django.conf import settings
from django.core.files.base import File
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access.roles import Role, require_role
from approvals import services as approvals
from approvals.models import ChangeRequest
from approvals.registry import Applied
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from ckptfleet import jsonsafe
from ckptfleet.celery import task
from ckptfleet.errors import DomainError, NotAuthenticated, PermissionRefused, TooLarge
from ckptfleet.rules import name_problem
from fleet import s3
from fleet.agent import WIRE_FORMAT
from fleet.choices import DeleteCondition, InventorySource, InventoryStatus, LocationKind, Tier
from fleet.models import Bucket, Host, HostToken, Inventory, StorageLocation

TOKEN_PREFIX = "cfh"  # noqa: S105 - the public marker of a host token, not a secret


def _hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


HOST_MAX_GPUS = 4096


def host_gpus_clean(value) -> int | None:
    """A host's GPU count: a whole number from 0 to 4,096, or None for "not said"; anything else is refused."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= HOST_MAX_GPUS:
        raise DomainError(
            f"a host's GPUs are a whole number from 0 to {HOST_MAX_GPUS:,}; got {value!r}", code="bad_gpus"
        )
    return value


def host_register(
    *, name: str, site: str = "", region: str = "", description: str = "", gpus=None, actor: Actor
) -> Host:
    if problem := name_problem(name, "host", Host._meta.get_field("name").max_length):
        raise DomainError(problem, code="bad_name")
    gpus = host_gpus_clean(gpus)
    with transaction.atomic():
        if Host.objects.filter(name=name).exists():
            raise DomainError(f"a host named {name!r} is already registered", code="exists")
        host = Host.objects.create(name=name, site=site, region=region, description=description, gpus=gpus)
        audit(
            actor,
            "host.register",
            target_type="host",
            target_id=host.pk,
            target_label=host.name,
            after={"name": name, "site": site, "region": region, "gpus": gpus},
        )
    return host


def host_gpus_set(*, host: Host, gpus, actor: Actor, request_id: str = "") -> Host:
    """Set (or clear, with None) the GPUs a host has, as its registration says them; audited as ``host.gpus``."""
    if actor.kind == ActorKind.USER:
        require_role(
            actor.user, Role.OPERATOR, doing=f"setting {host.name}'s GPUs", target_type="host", target_id=host.pk
        )
    gpus = host_gpus_clean(gpus)
    with transaction.atomic():
        host = Host.objects.select_for_update(of=("self",)).get(pk=host.pk)
        if host.gpus == gpus:
            return host
        before, host.gpus = host.gpus, gpus
        host.save(update_fields=["gpus"])
        audit(
            actor,
            "host.gpus",
            target_type="host",
            target_id=host.pk,
            target_label=host.name,
            before={"gpus": before},
            after={"gpus": gpus},
            request_id=request_id,
        )
    return host


def host_mark_down(*, host: Host, reason: str, actor: Actor, request_id: str = "") -> Host:
    """An operator says ``host`` is down (a node failure, maintenance): its copies drop out of the restore
    ranking with this reason until it is marked up. Audited; marking a host that is down again changes nothing."""
    if actor.kind == ActorKind.USER:
        require_role(
            actor.user, Role.OPERATOR, doing=f"marking {host.name} down", target_type="host", target_id=host.pk
        )
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("say why the host is down (it is shown beside its copies)")
    if len(reason) > 2000:
        raise DomainError("a reason is at most 2,000 characters")
    with transaction.atomic():
        host = Host.objects.select_for_update(of=("self",)).get(pk=host.pk)
        if host.down_since is not None:
            return host
        host.down_since, host.down_reason, host.down_label = timezone.now(), reason, actor.label
        host.save(update_fields=["down_since", "down_reason", "down_label"])
        audit(
            actor,
            "host.down",
            target_type="host",
            target_id=host.pk,
            target_label=host.name,
            reason=reason,
            before={"down": False},
            after={"down": True, "down_since": host.down_since.isoformat()},
            request_id=(request_id or "")[:64],
        )
    return host


def host_mark_up(*, host: Host, reason: str, actor: Actor, request_id: str = "") -> Host:
    """The host is back: its copies are ranked again. Audited; a host that is not down is left as it is."""
    if actor.kind == ActorKind.USER:
        require_role(actor.user, Role.OPERATOR, doing=f"marking {host.name} up", target_type="host", target_id=host.pk)
    with transaction.atomic():
        host = Host.objects.select_for_update(of=("self",)).get(pk=host.pk)
        if host.down_since is None:
            return host
        before = {"down": True, "down_since": host.down_since.isoformat(), "down_reason": host.down_reason}
        host.down_since, host.down_reason, host.down_label = None, "", ""
        host.save(update_fields=["down_since", "down_reason", "down_label"])
        audit(
            actor,
            "host.up",
            target_type="host",
            target_id=host.pk,
            target_label=host.name,
            reason=(reason or "").strip()[:2000],
            before=before,
            after={"down": False},
            request_id=(request_id or "")[:64],
        )
    return host


def host_token_issue(*, host: Host, actor: Actor, revoke_others: bool = True) -> str:
    """Make a new token for ``host`` and return it; it is shown once and only its hash is kept.

    Rotating revokes every earlier token of the host in the same transaction, so a leaked token
    stops working the moment a new one is issued.
    """
    prefix = secrets.token_hex(6)
    raw = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        now = timezone.now()
        revoked = 0
        if revoke_others:
            revoked = HostToken.objects.filter(host=host, revoked_at__isnull=True).update(revoked_at=now)
        token = HostToken.objects.create(host=host, prefix=prefix, token_hash=_hash_token(raw))
        audit(
            actor,
            "host.token_issue",
            target_type="host",
            target_id=host.pk,
            target_label=host.name,
            after={"token_prefix": token.prefix, "revoked_tokens": revoked},
        )
    return raw


def host_authenticate(raw: str) -> Host:
    """The host a bearer token belongs to, or NotAuthenticated. Constant-time on the secret part."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise NotAuthenticated("the token is malformed; use the token printed by `manage.py fleet_host`")
    token = HostToken.objects.select_related("host").filter(prefix=parts[1]).first()
    if token is None or not hmac.compare_digest(token.token_hash, _hash_token(raw)):
        raise NotAuthenticated("the token is not valid")
    if token.revoked_at is not None:
        raise NotAuthenticated("the token was revoked; issue a new one with `manage.py fleet_host rotate-token`")
    now = timezone.now()
    # Touch at most once a minute: a busy fleet should not turn every upload into two writes.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        HostToken.objects.filter(pk=token.pk).update(last_used_at=now)
        # Any call of the agent (an upload, a poll for deletions or pulls) is a sign of life of its host.
        Host.objects.filter(pk=token.host_id).update(last_seen_at=now)
    return token.host


def location_add(
    *,
    host: Host | None,
    name: str,
    kind: str,
    tier: str,
    root_path: str = "",
    path_template: str = "{team}/{run}",
    default_team: Any = None,  # catalog's Team (fleet.models names it by label, not by import)
    site: str = "",
    region: str = "",
    actor: Actor,
) -> StorageLocation:
    if kind not in LocationKind.values:
        raise DomainError(f"unknown location kind {kind!r}; use one of {', '.join(LocationKind.values)}")
    if tier not in Tier.values:
        raise DomainError(f"unknown tier {tier!r}; use one of {', '.join(Tier.values)}")
    if kind in (LocationKind.NVME, LocationKind.PFS):
        if host is None or not root_path.startswith("/"):
            raise DomainError("a host location needs a host and an absolute root path")
        root_path = root_path.rstrip("/") or "/"
    if "{run}" not in path_template:
        raise DomainError("the path template must contain {run}, e.g. {team}/{run}")
    if problem := name_problem(name, "storage location", StorageLocation._meta.get_field("name").max_length):
        raise DomainError(problem, code="bad_name")
    with transaction.atomic():
        if StorageLocation.objects.filter(name=name).exists():
            raise DomainError(f"a storage location named {name!r} already exists", code="exists")
        if host and StorageLocation.objects.filter(host=host, root_path=root_path).exists():
            raise DomainError(f"{host.name} already has the root {root_path}", code="exists")
        location = StorageLocation.objects.create(
            host=host,
            name=name,
            kind=kind,
            tier=tier,
            root_path=root_path,
            path_template=path_template,
            default_team=default_team,
            site=site,
            region=region,
        )
        audit(
            actor,
            "location.add",
            target_type="location",
            target_id=location.pk,
            target_label=location.name,
            after={
                "kind": kind,
                "tier": tier,
                "host": host.name if host else None,
                "root": root_path,
                "path_template": path_template,
            },
        )
    return location


class _LimitedReader:
    """Reads at most ``limit`` bytes from a request stream and fails with 413 past that."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.stream.read(size if size and size > 0 else 1024 * 1024)
        self.read_bytes += len(chunk)
        if self.read_bytes > self.limit:
            raise TooLarge(
                f"the inventory is larger than {self.limit} bytes compressed "
                "(CKPTFLEET_INVENTORY_MAX_BYTES); split the root or raise the limit"
            )
        return chunk


def _read_header(first_chunk: bytes) -> dict:
    """Decode just enough of the gzip stream to read and check the header line."""
    try:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        text = decompressor.decompress(first_chunk, settings.INVENTORY_MAX_LINE + 1)
    except zlib.error:
        raise DomainError("the body is not gzip-compressed NDJSON", code="bad_inventory") from None
    line, newline, _ = text.partition(b"\n")
    if not newline:
        raise DomainError("the inventory has no complete header line", code="bad_inventory")
    try:
        header = jsonsafe.loads(line, refuse_nul=True)
    except (jsonsafe.JsonTooDeep, jsonsafe.JsonHasNul) as exc:
        raise DomainError(f"line 1: the header is refused: {exc}", code="bad_inventory") from None
    except ValueError:
        raise DomainError("line 1: the header is not valid JSON", code="bad_inventory") from None
    if not isinstance(header, dict) or header.get("type") != "header":
        raise DomainError('line 1: the first line must be {"type": "header", ...}', code="bad_inventory")
    if header.get("format") != WIRE_FORMAT:
        raise DomainError(
            f"line 1: unsupported format {header.get('format')!r}; expected {WIRE_FORMAT}", code="bad_inventory"
        )
    return header


FS_BYTES_MAX = 2**63 - 1  # a bigint column; 8 EiB is far past any file system a host mounts


def filesystem_space_of(header: dict) -> tuple[int, int] | None:
    """The file system's (size, free) bytes an inventory header reports, or None when it reports none (an agent
    older than the fields). Raises ``DomainError`` (``bad_inventory``) for values that cannot be true: one of
    the two alone, a value that is not a whole number of bytes, negative, or more free than the size."""
    size, free = header.get("fs_size_bytes"), header.get("fs_free_bytes")
    if size is None and free is None:
        return None
    if size is None or free is None:
        missing = "fs_size_bytes" if size is None else "fs_free_bytes"
        raise DomainError(f"line 1: the header reports the file system's space without {missing}", code="bad_inventory")
    for name, value in (("fs_size_bytes", size), ("fs_free_bytes", free)):
        if type(value) is not int or not 0 <= value <= FS_BYTES_MAX:
            raise DomainError(
                f"line 1: {name} must be a whole number of bytes from 0 to {FS_BYTES_MAX}, not {value!r}",
                code="bad_inventory",
            )
    if free > size:
        raise DomainError(f"line 1: fs_free_bytes ({free}) is more than fs_size_bytes ({size})", code="bad_inventory")
    return size, free


def location_record_filesystem(
    *, location: StorageLocation, size_bytes: int, free_bytes: int, measured_at: datetime
) -> bool:
    """Keep what an agent measured of the file system under ``location`` (its size and free bytes), unless a
    newer measurement is already kept (uploads may arrive out of order). The agent's facts, not an action: like
    ``last_seen_at`` it is not audited. Returns whether it was kept. Refuses values that cannot be true."""
    filesystem_space_of({"fs_size_bytes": size_bytes, "fs_free_bytes": free_bytes})
    if location.kind not in (LocationKind.NVME, LocationKind.PFS):
        raise DomainError(f"{location.name} is a bucket: it has no file system to report", code="bad_inventory")
    kept = (
        StorageLocation.objects.filter(pk=location.pk)
        .filter(Q(fs_reported_at__isnull=True) | Q(fs_reported_at__lte=measured_at))
        .update(fs_size_bytes=size_bytes, fs_free_bytes=free_bytes, fs_reported_at=measured_at)
    )
    if kept:
        location.fs_size_bytes, location.fs_free_bytes, location.fs_reported_at = size_bytes, free_bytes, measured_at
    return bool(kept)


def inventory_receive(*, host: Host, stream: BinaryIO, content_encoding: str) -> Inventory:
    """Store an uploaded inventory of ``host`` and queue its ingestion. Nothing is applied here.

    The header is checked before anything is stored: a token reports for its own host only, and
    for one of that host's registered roots only.
    """

    if content_encoding.strip().lower() != "gzip":
        raise DomainError("send the inventory gzip-compressed with Content-Encoding: gzip", code="bad_inventory")
    reader = _LimitedReader(stream, settings.INVENTORY_MAX_BYTES)
    first = reader.read(256 * 1024)
    header = _read_header(first)
    if header.get("host") != host.name:
        raise PermissionRefused(
            f"this token belongs to host {host.name!r} and cannot report for {header.get('host')!r}"
        )
    root = header.get("root")
    location = StorageLocation.objects.filter(host=host, root_path=root).first() if isinstance(root, str) else None
    if location is None:
        roots = ", ".join(host.locations.values_list("root_path", flat=True)) or "none"
        raise DomainError(
            f"{root!r} is not a registered root of {host.name} (registered: {roots})", code="unknown_root"
        )
    space = filesystem_space_of(header)

    import tempfile

    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
        spool.write(first)
        while chunk := reader.read(1024 * 1024):
            spool.write(chunk)
        spool.seek(0)
        taken_at = None
        if isinstance(header.get("started_at"), str):
            from django.utils.dateparse import parse_datetime

            taken_at = parse_datetime(header["started_at"])
        with transaction.atomic():
            inventory = Inventory(
                location=location,
                host=host,
                source=InventorySource.AGENT,
                agent=str(header.get("agent", ""))[:100],
                upload_bytes=reader.read_bytes,
                taken_at=taken_at,
            )
            inventory.upload.save(f"{host.name}-{location.pk}.ndjson.gz", File(spool), save=False)
            inventory.save()
            now = timezone.now()
            Host.objects.filter(pk=host.pk).update(last_seen_at=now)
            if space is not None:
                # When the agent started the walk, which is when it measured; a clock ahead of ours is not trusted.
                measured = min(taken_at, now) if taken_at and timezone.is_aware(taken_at) else now
                location_record_filesystem(
                    location=location, size_bytes=space[0], free_bytes=space[1], measured_at=measured
                )
            # By task name: ingestion sits above fleet (ingest.tasks), which starts it without importing it.
            transaction.on_commit(lambda: task("ingest.tasks.ingest_inventory").delay(inventory.pk))
    return inventory


def host_root_or_refuse(host: Host, root: str) -> None:
    """Refuse ``root`` unless it is a registered root of ``host``: an agent asks for work below its own roots only.

    Raises ``DomainError`` (code ``unknown_root``). Shared by the agent's deletions and its promotion pulls.
    """
    if not StorageLocation.objects.filter(host=host, root_path=root).exists():
        raise DomainError(f"{root!r} is not a registered root of {host.name}", code="unknown_root")


def gzip_lines(lines) -> bytes:
    """Encode NDJSON lines as an inventory body (used by the demo and tests)."""
    payload = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
    return gzip.compress(payload)


__all__ = [
    "InventoryStatus",
    "gzip_lines",
    "host_authenticate",
    "host_register",
    "host_root_or_refuse",
    "host_token_issue",
    "inventory_receive",
    "location_add",
]


SOFT_DELETE_MAX_DAYS = 3650


SOFT_DELETE_KIND = "location.soft_delete"


def require_location_admin(actor: Actor, location: StorageLocation, *, doing: str) -> None:
    """A person changing how a location keeps or deletes data must be an admin; a command or a task acts as the
    product. Raises PermissionRefused, audited by ``require_role`` like every refusal."""
    if actor.kind != ActorKind.USER:
        return
    if actor.user is None:
        raise PermissionRefused(f"{doing} needs the signed-in user")
    require_role(
        actor.user,
        Role.ADMIN,
        doing=doing,
        source=actor.source,
        target_type="location",
        target_id=location.pk,
    )


def location_set_soft_delete(
    *, location: StorageLocation, days: int | None, reason: str, actor: Actor
) -> StorageLocation | ChangeRequest:
    """Set how many days executed deletions at ``location`` stay recoverable in the trash (None: the default).

    0 turns the trash off there and is refused when CKPTFLEET_SOFT_DELETE_REQUIRED=1 (compliance), as is
    None while the default itself is 0. Shortening the window can make deletions final sooner: a person's
    shortening is filed as a change request (returned) that another approver applies
    (``apply_soft_delete_change``); lengthening it, and a command's change, apply at once. Audited with the
    old and new value.
    """
    require_location_admin(actor, location, doing=f"changing the recovery window of {location.name}")
    if days is not None and (not isinstance(days, int) or isinstance(days, bool)):
        raise DomainError("days must be a whole number of days, or empty for the default")
    if days is not None and not 0 <= days <= SOFT_DELETE_MAX_DAYS:
        raise DomainError(f"days must be between 0 and {SOFT_DELETE_MAX_DAYS}")
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError("a reason is required", code="required")
    effective = settings.SOFT_DELETE_DAYS if days is None else days
    if effective == 0 and settings.SOFT_DELETE_REQUIRED:
        raise PermissionRefused(
            "soft delete is required here (CKPTFLEET_SOFT_DELETE_REQUIRED): the recovery window cannot be 0",
            code="soft_delete_required",
        )
    with transaction.atomic():
        current = StorageLocation.objects.locked().get(pk=location.pk)
        before, before_effective = current.soft_delete_days, current.trash_days
        if actor.kind == ActorKind.USER and effective < before_effective:
            # Shortening it can make deletions final sooner: a second person approves it (approvals).
            return approvals.request_change(
                kind=SOFT_DELETE_KIND,
                target_id=current.pk,
                target_label=current.name,
                before={"soft_delete_days": before, "effective_days": before_effective},
                after={"soft_delete_days": days, "effective_days": effective},
                actor=actor,
                reason=reason.strip()[:2000],
            )
        current.soft_delete_days = days
        current.save(update_fields=["soft_delete_days"])
        audit(
            actor,
            "location.soft_delete",
            target_type="location",
            target_id=current.pk,
            target_label=current.name,
            reason=reason.strip()[:2000],
            before={"soft_delete_days": before, "effective_days": before_effective},
            after={"soft_delete_days": days, "effective_days": effective},
        )
    return current


def apply_soft_delete_change(change: ChangeRequest, approver: Actor) -> Applied:
    """Apply an approved shortening of a location's recovery window (``approvals.registry``), in the approval's
    transaction: refused when the window changed since it was asked for."""
    current = StorageLocation.objects.locked().get(pk=change.target_id)
    asked = change.change
    if current.soft_delete_days != asked["before"]["soft_delete_days"]:
        raise DomainError(
            f"the recovery window of {current.name} changed since this was asked for; reject this and ask again",
            code="stale",
            http_status=409,
        )
    days = asked["after"]["soft_delete_days"]
    effective = settings.SOFT_DELETE_DAYS if days is None else days
    if effective == 0 and settings.SOFT_DELETE_REQUIRED:
        raise PermissionRefused("soft delete is required here (CKPTFLEET_SOFT_DELETE_REQUIRED): it cannot be 0")
    before = {"soft_delete_days": current.soft_delete_days, "effective_days": current.trash_days}
    current.soft_delete_days = days
    current.save(update_fields=["soft_delete_days"])
    return Applied(
        action="location.soft_delete",
        target_label=current.name,
        before=before,
        after={"soft_delete_days": days, "effective_days": effective},
    )


def describe_soft_delete_change(change: dict) -> list[str]:
    before, after = change.get("before", {}), change.get("after", {})
    return [
        f"Recovery window: {before.get('effective_days')} days -> {after.get('effective_days')} days"
        + (" (the default)" if after.get("soft_delete_days") is None else "")
    ]


# --- conditional deletes: which ETag condition a bucket's store honours -------------------------------


def bucket_record_delete_condition(*, bucket: Bucket, found: str, actor: Actor) -> Bucket:
    """Store what the conditional-delete probe found on ``bucket`` (``fleet.s3.probe_conditional_delete``), audited
    ``bucket.delete_condition`` in the caller's transaction (the executor's batch, or the on-demand probe)."""
    if found not in DeleteCondition.values:
        raise DomainError(f"not a delete condition: {found!r}")
    now = timezone.now()
    before = {"delete_condition": bucket.delete_condition, "in_force": bucket.delete_condition_in_force}
    Bucket.objects.filter(pk=bucket.pk).update(delete_condition=found, delete_condition_probed_at=now)
    bucket.delete_condition, bucket.delete_condition_probed_at = found, now
    audit(
        actor,
        "bucket.delete_condition",
        target_type="location",
        target_id=bucket.location_id,
        target_label=bucket.location.name,
        reason="probed: an object written, then deleted under a wrong ETag",
        before=before,
        after={"delete_condition": found, "in_force": bucket.delete_condition_in_force},
    )
    return bucket


def bucket_probe_delete_condition(*, location: StorageLocation, actor: Actor) -> Bucket:
    """Ask the bucket's store now which conditional delete it honours (it writes and removes one small object
    below the bucket's ``.ckptfleet-trash/probe/``), and record the answer. A probe that cannot tell (the object
    could not be written) is recorded as "none": without versioning, hard deletes there are then refused."""
    bucket = Bucket.objects.select_related("location").get(location=location)
    found = s3.probe_conditional_delete(s3.client_for(bucket), bucket.bucket_name) or DeleteCondition.NONE
    with transaction.atomic():
        return bucket_record_delete_condition(bucket=bucket, found=found, actor=actor)


def bucket_set_delete_condition(*, location: StorageLocation, setting: str, reason: str, actor: Actor) -> Bucket:
    """An operator's statement of which conditional delete the bucket's store honours ("" to follow the probe),
    for a store the probe cannot reach or that says one thing and does another. Admins only; audited with the
    value before and after. Saying "batch" or "single" of a store that ignores the condition lets a rewritten
    object be deleted: the reason says who vouched for the store."""
    require_location_admin(actor, location, doing=f"setting the delete condition of {location.name}")
    if setting not in ("", *DeleteCondition.values):
        choices = ", ".join(DeleteCondition.values)
        raise DomainError(f"the delete condition must be one of {choices}, or empty to follow the probe")
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError("a reason is required", code="required")
    with transaction.atomic():
        bucket = Bucket.objects.select_for_update(of=("self",)).select_related("location").get(location=location)
        before = {"setting": bucket.delete_condition_setting, "in_force": bucket.delete_condition_in_force}
        bucket.delete_condition_setting = setting
        bucket.save(update_fields=["delete_condition_setting"])
        audit(
            actor,
            "bucket.delete_condition",
            target_type="location",
            target_id=location.pk,
            target_label=location.name,
            reason=reason.strip()[:2000],
            before=before,
            after={"setting": setting, "in_force": bucket.delete_condition_in_force},
        )
    return bucket
