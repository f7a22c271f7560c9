"""The S3 store of the audit chain's anchors: one object per anchor, kept in Object Lock COMPLIANCE mode.

COMPLIANCE retention cannot be shortened or removed before it ends, by anyone, the account's root included, so an
anchor stays readable for the verifier however the database is changed. The bucket must be created with Object Lock
enabled. It lives here, beside the S3 client, and registers itself with audit.anchors at start (FleetConfig.ready).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from audit.anchors import MAX_LINE, encode
from audit.choices import AnchorTarget
from fleet.s3 import get_version_small, make_client, object_versions, parse_uri, put_compliance_locked


class S3AnchorStore:
    """Anchors as ``<prefix>YYYY/MM/DD/HHMMSS-<count>.json`` objects, each version locked until its retention ends."""

    target = AnchorTarget.S3

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str = "",
        region_name: str = "",
        addressing_style: str = "auto",
        credentials: str = "default",
        retain_days: int = 365,
    ) -> None:
        self.bucket, self.prefix = parse_uri(uri)
        self.retain_days = retain_days
        self._client_args = {
            "endpoint_url": endpoint_url,
            "region_name": region_name,
            "addressing_style": addressing_style,
            "credentials": credentials,
        }
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_client(**self._client_args)
        return self._client

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def holds(self, location: str) -> bool:
        return location.startswith(f"s3://{self.bucket}/{self.prefix}")

    def write(self, doc: dict[str, Any], at: datetime) -> tuple[str, datetime | None]:
        key = f"{self.prefix}{at:%Y/%m/%d/%H%M%S}-{doc['count']:012d}.json"
        retain_until = at + timedelta(days=self.retain_days)
        version_id = put_compliance_locked(self.client, self.bucket, key, encode(doc), retain_until=retain_until)
        return f"s3://{self.bucket}/{key}?versionId={version_id}", retain_until

    def read_all(self) -> Iterator[tuple[str, bytes]]:
        for key, version_id in object_versions(self.client, self.bucket, self.prefix):
            raw = get_version_small(self.client, self.bucket, key, version_id, limit=MAX_LINE)
            yield f"s3://{self.bucket}/{key}?versionId={version_id}", raw


def s3_anchor_store() -> S3AnchorStore | None:
    """The store the settings configure (CKPTFLEET_AUDIT_ANCHOR_S3 and its companions), or None."""
    if not settings.AUDIT_ANCHOR_S3:
        return None
    return S3AnchorStore(
        settings.AUDIT_ANCHOR_S3,
        endpoint_url=settings.AUDIT_ANCHOR_S3_ENDPOINT,
        region_name=settings.AUDIT_ANCHOR_S3_REGION,
        addressing_style=settings.AUDIT_ANCHOR_S3_ADDRESSING,
        credentials=settings.AUDIT_ANCHOR_S3_CREDENTIALS,
        retain_days=settings.AUDIT_ANCHOR_RETAIN_DAYS,
    )
