"""What a scan records beside its snapshot, in the apply's transaction: the incomplete multipart uploads
and the non-current versions of a versioned bucket."""

from __future__ import annotations

from datetime import datetime

from fleet import s3
from fleet.models import (
    MultipartUpload,
    ObjectVersion,
    StorageLocation,
)


def apply_uploads(location: StorageLocation, uploads: list[s3.UploadInfo] | None, now: datetime) -> None:
    """Record the incomplete multipart uploads a scan found; mark gone those it no longer finds."""
    if uploads is None:
        return  # unknown is not none: leave what the last scan found
    existing = {u.upload_id: u for u in MultipartUpload.objects.filter(location_id=location.pk)}
    seen: set[str] = set()
    new: list[MultipartUpload] = []
    changed: list[MultipartUpload] = []
    fields = ["key", "initiated_at", "storage_class", "parts", "bytes", "gone_at"]
    for up in uploads:
        if up.upload_id in seen:
            continue
        seen.add(up.upload_id)
        values = {
            "key": up.key,
            "initiated_at": up.initiated,
            "storage_class": up.storage_class[:32],
            "parts": up.parts,
            "bytes": up.bytes,
            "gone_at": None,
        }
        row = existing.get(up.upload_id)
        if row is None:
            new.append(MultipartUpload(location_id=location.pk, upload_id=up.upload_id, first_seen_at=now, **values))
        elif any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            changed.append(row)
    MultipartUpload.objects.bulk_create(new, batch_size=1000)
    MultipartUpload.objects.bulk_update(changed, fields, batch_size=1000)
    vanished = [u.pk for uid, u in existing.items() if uid not in seen and u.gone_at is None]
    for i in range(0, len(vanished), 1000):
        MultipartUpload.objects.filter(pk__in=vanished[i : i + 1000]).update(gone_at=now)


def apply_versions(
    location: StorageLocation, versions: list[s3.VersionInfo] | None, *, versioned: bool, now: datetime
) -> None:
    """Record the non-current versions this scan found; mark gone those it no longer finds."""
    if versions is None:
        if versioned:
            return  # unknown is not none: leave what the last scan found
        # Versioning never enabled (or the store has none): nothing non-current can exist.
        versions = []
    # Gone ones too: a version found again (a listing that missed it) is revived, not duplicated.
    existing = {
        (v.key, v.version_id): v
        for v in ObjectVersion.objects.filter(location_id=location.pk).only(
            "pk", "key", "version_id", "storage_class", "gone_at"
        )
    }
    seen: set[tuple[str, str]] = set()
    new: list[ObjectVersion] = []
    changed: list[ObjectVersion] = []
    for v in versions:
        ident = (v.key, v.version_id[:1024])
        if ident in seen or not v.version_id:
            continue
        seen.add(ident)
        row = existing.get(ident)
        if row is None:
            new.append(
                ObjectVersion(
                    location_id=location.pk,
                    key=v.key,
                    version_id=v.version_id[:1024],
                    size=v.size,
                    last_modified=v.last_modified,
                    etag=v.etag[:200],
                    storage_class=v.storage_class[:32],
                    delete_marker=v.delete_marker,
                    first_seen_at=now,
                )
            )
        elif row.storage_class != v.storage_class[:32] or row.gone_at is not None:
            row.storage_class = v.storage_class[:32]  # a lifecycle transition
            row.gone_at = None
            changed.append(row)
    ObjectVersion.objects.bulk_create(new, batch_size=1000)
    ObjectVersion.objects.bulk_update(changed, ["storage_class", "gone_at"], batch_size=1000)
    vanished = [row.pk for ident, row in existing.items() if ident not in seen and row.gone_at is None]
    for i in range(0, len(vanished), 1000):
        ObjectVersion.objects.filter(pk__in=vanished[i : i + 1000]).update(gone_at=now)
