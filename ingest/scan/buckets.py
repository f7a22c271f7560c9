"""Registering a bucket (and prefix) as a storage location, and changing its settings, audited."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.db import transaction

from audit.actor import Actor
from audit.services import audit as audit_event
from catalog.models import Team
from ckptfleet.errors import DomainError
from ckptfleet.rules import is_storage_class
from fleet import s3
from fleet.choices import AddressingStyle, LocationKind, Tier
from fleet.models import (
    Bucket,
    StorageLocation,
)
from fleet.services import location_add
from ingest.inventory.lines import check_path

MAX_RECHECK_DAYS = 3650
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9-]{0,40}$")


def _check_endpoint(url: str) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DomainError(f"the endpoint URL {url!r} must look like https://s3.example.com")
    if parts.username or parts.password:
        raise DomainError("the endpoint URL must not carry credentials; give a credentials reference instead")
    if parts.query or parts.fragment:
        raise DomainError("the endpoint URL must not have a query or fragment")
    url = url.rstrip("/")
    if len(url) > 200:
        raise DomainError("the endpoint URL is longer than 200 characters")
    return url


def _check_prefix(prefix: str) -> str:
    prefix = (prefix or "").lstrip("/")
    if not prefix:
        return ""
    try:
        check_path(prefix.rstrip("/"))
    except ValueError as exc:
        raise DomainError(f"the prefix {prefix!r} is not usable: {exc}") from None
    prefix = prefix.rstrip("/") + "/"
    if len(prefix.encode()) > 1024:
        raise DomainError("the prefix is longer than 1024 bytes, the longest S3 key")
    return prefix


def _check_tier_map(mapping: dict[str, str] | None) -> dict[str, str]:
    checked: dict[str, str] = {}
    for storage_class, tier in (mapping or {}).items():
        key = str(storage_class).strip().upper()
        if not is_storage_class(key):
            raise DomainError(f"{storage_class!r} is not a storage class name (e.g. STANDARD_IA, GLACIER)")
        if tier not in Tier.values:
            raise DomainError(f"unknown tier {tier!r} for {key}; use one of {', '.join(Tier.values)}")
        checked[key] = tier
    return checked


def bucket_add(
    *,
    name: str,
    bucket_name: str,
    prefix: str = "",
    endpoint_url: str = "",
    region_name: str = "",
    addressing_style: str = AddressingStyle.AUTO,
    credentials: str = "default",
    path_template: str = "{team}/{run}",
    tier: str = Tier.OBJECT_STANDARD,
    storage_class_tiers: dict[str, str] | None = None,
    default_team: Team | None = None,
    site: str = "",
    region: str = "",
    scan_every_minutes: int = 60,
    fetch_checksums: bool = True,
    recheck_days: int = 7,
    inventory_report_uri: str = "",
    actor: Actor,
) -> Bucket:
    """Register a bucket (and prefix) as a storage location; it is scanned on schedule and on demand.

    ``credentials`` is a reference resolved by the workers (see ``fleet.s3``), never a secret.
    ``tier`` is the location's tier for storage classes the mapping does not know; ``region``
    (the failure domain) defaults to the bucket's region. ``recheck_days``: every object is HEADed
    again when the last full pass is that old (0: never). Two registrations of one bucket whose
    prefixes overlap are refused: their objects would be counted twice.
    """
    prefix, endpoint_url, tiers, inventory_report_uri = _checked_bucket_settings(
        bucket_name=bucket_name,
        prefix=prefix,
        endpoint_url=endpoint_url,
        region_name=region_name,
        addressing_style=addressing_style,
        credentials=credentials,
        storage_class_tiers=storage_class_tiers,
        scan_every_minutes=scan_every_minutes,
        recheck_days=recheck_days,
        inventory_report_uri=inventory_report_uri,
    )
    with transaction.atomic():
        _refuse_overlap(endpoint_url, bucket_name, prefix)
        location = location_add(
            host=None,
            name=name,
            kind=LocationKind.BUCKET,
            tier=tier,
            root_path=f"s3://{bucket_name}/{prefix}",
            path_template=path_template,
            default_team=default_team,
            site=site,
            region=region or region_name,
            actor=actor,
        )
        bucket = Bucket.objects.create(
            location=location,
            endpoint_url=endpoint_url,
            region_name=region_name,
            bucket_name=bucket_name,
            prefix=prefix,
            addressing_style=addressing_style,
            credentials=credentials,
            storage_class_tiers=tiers,
            scan_every_minutes=scan_every_minutes,
            fetch_checksums=fetch_checksums,
            recheck_days=recheck_days,
            inventory_report_uri=inventory_report_uri,
        )
        audit_event(
            actor,
            "bucket.add",
            target_type="location",
            target_id=location.pk,
            target_label=location.name,
            after={
                "bucket": bucket_name,
                "prefix": prefix,
                "endpoint_url": endpoint_url,
                "region_name": region_name,
                "addressing_style": addressing_style,
                "credentials": credentials,  # a reference such as "file:prod-ro", never a key
                "storage_class_tiers": tiers,
                "scan_every_minutes": scan_every_minutes,
                "fetch_checksums": fetch_checksums,
                "recheck_days": recheck_days,
                "inventory_report_uri": inventory_report_uri,
            },
        )
    return bucket


def _checked_bucket_settings(
    *,
    bucket_name: str,
    prefix: str,
    endpoint_url: str,
    region_name: str,
    addressing_style: str,
    credentials: str,
    storage_class_tiers: dict[str, str] | None,
    scan_every_minutes: int,
    recheck_days: int,
    inventory_report_uri: str,
) -> tuple[str, str, dict[str, str], str]:
    """Refuse a bucket registration's bad values (``DomainError`` saying which); return the normalised prefix,
    endpoint, storage-class tier map and S3 Inventory report location."""
    if not _BUCKET_NAME.match(bucket_name or "") or ".." in bucket_name:
        raise DomainError(f"{bucket_name!r} is not a bucket name (3-63 lowercase letters, digits, '.', '-', '_')")
    prefix = _check_prefix(prefix)
    endpoint_url = _check_endpoint(endpoint_url)
    if not _REGION.match(region_name or ""):
        raise DomainError(f"{region_name!r} is not a region name (e.g. eu-west-1, auto)")
    if addressing_style not in AddressingStyle.values:
        raise DomainError(
            f"unknown addressing style {addressing_style!r}; use one of {', '.join(AddressingStyle.values)}"
        )
    try:
        s3.check_credentials_ref(credentials)
    except ValueError as exc:
        raise DomainError(str(exc), code="bad_credentials_reference") from None
    tiers = _check_tier_map(storage_class_tiers)
    if not isinstance(scan_every_minutes, int) or not (scan_every_minutes == 0 or scan_every_minutes >= 5):
        raise DomainError("scan every 0 minutes (only on demand) or every 5 minutes or more")
    _check_recheck_days(recheck_days)
    if inventory_report_uri:
        try:
            report_bucket, report_prefix = s3.parse_uri(inventory_report_uri)
        except ValueError as exc:
            raise DomainError(f"the S3 Inventory report location is not usable: {exc}") from None
        inventory_report_uri = f"s3://{report_bucket}/{report_prefix}"
    return prefix, endpoint_url, tiers, inventory_report_uri


def _refuse_overlap(endpoint_url: str, bucket_name: str, prefix: str) -> None:
    """Two registrations of one bucket whose prefixes overlap would count their objects twice."""
    for other in Bucket.objects.filter(endpoint_url=endpoint_url, bucket_name=bucket_name).select_related("location"):
        if other.prefix.startswith(prefix) or prefix.startswith(other.prefix):
            raise DomainError(
                f"s3://{bucket_name}/{prefix} overlaps s3://{bucket_name}/{other.prefix}, registered as "
                f"{other.location.name!r}: its objects would be counted twice",
                code="exists",
            )


def _check_recheck_days(days: object) -> None:
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_RECHECK_DAYS:
        raise DomainError(f"recheck every 0 days (never) to {MAX_RECHECK_DAYS:,} days, not {days!r}")


def bucket_set(*, location: StorageLocation, recheck_days: int, actor: Actor) -> Bucket:
    """Change how often every object of a bucket is HEADed again for its checksums (0: never), audited.

    The next scan is a recheck when the last full pass is older than the new setting.
    """
    _check_recheck_days(recheck_days)
    with transaction.atomic():
        bucket = Bucket.objects.select_for_update(of=("self",)).filter(location_id=location.pk).first()
        if bucket is None:
            raise DomainError(f"{location.name} is not a bucket", code="not_a_bucket")
        before = bucket.recheck_days
        if before != recheck_days:
            bucket.recheck_days = recheck_days
            bucket.save(update_fields=["recheck_days"])
            audit_event(
                actor,
                "bucket.set",
                target_type="location",
                target_id=location.pk,
                target_label=location.name,
                before={"recheck_days": before},
                after={"recheck_days": recheck_days},
            )
    return bucket
