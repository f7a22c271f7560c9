"""The one module that talks to S3 and S3-compatible stores (MinIO, Ceph RGW, R2, GCS's XML API) through boto3.

Everything here is read-only: listing objects and incomplete multipart uploads, HEAD for stored
checksums and Object Lock state, ranged GETs for the few bytes the facts extractors need, and the
bucket's versioning and Object Lock configuration. Every failure that survives botocore's own
retries (mode "standard": exponential backoff with jitter on throttling, 5xx and timeouts) comes
out as one ``S3Error`` carrying the store's error code and message, never a botocore type.

Credentials are resolved from a reference stored on the bucket, never from the database:
``default`` is boto3's own chain (environment, shared files, instance role), ``profile:NAME`` a
named profile of the worker's AWS config, ``file:NAME`` a JSON file ``NAME`` in
``settings.S3_SECRETS_DIR``. No secret is logged or put into an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)
from django.conf import settings

if TYPE_CHECKING:
    from fleet.models import Bucket

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5  # per request, the first one included
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
POOL_CONNECTIONS = 32  # listing and fetching threads share one client
PAGE_SIZE = 1000  # ListObjectsV2's own maximum
READ_AHEAD = 64 * 1024  # the smallest ranged GET: a safetensors header or a zip tail usually fits
MAX_SMALL_OBJECT = 64 * 1024 * 1024  # manifests read whole (S3 Inventory manifest.json)
USER_AGENT_APPID = "ckptfleet"

_CREDENTIALS_REF = re.compile(r"^(?:default|profile:[A-Za-z0-9._@+=,-]{1,64}|file:[A-Za-z0-9][A-Za-z0-9._-]{0,127})$")
_MULTIPART_ETAG = re.compile(r"-\d+$")
# Codes that say "try again later" rather than "this will never work".
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestThrottled",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "PriorRequestNotComplete",
    }
)
# Codes of stores that do not implement an optional feature at all.
_NOT_IMPLEMENTED_CODES = frozenset({"NotImplemented", "XNotImplemented", "MethodNotAllowed", "501"})
# A policy refusal or a missing feature: what the feature would tell is then unknown.
_UNSUPPORTED_CODES = _NOT_IMPLEMENTED_CODES | {"AccessDenied"}
_GONE_CODES = frozenset({"NoSuchKey", "404", "NotFound", "PreconditionFailed", "412", "NoSuchVersion"})
# (HEAD field, our algorithm name, digest length), strongest first: a store returns at most one.
_CHECKSUM_FIELDS = (
    ("ChecksumSHA256", "sha256", 32),
    ("ChecksumSHA1", "sha1", 20),
    ("ChecksumCRC64NVME", "crc64nvme", 8),
    ("ChecksumCRC32C", "crc32c", 4),
    ("ChecksumCRC32", "crc32", 4),
)
CHECKSUM_ALGO_MAX = 16  # ShardFile.checksum_algo
# Storage classes whose objects cannot be read without a restore first.
RESTORE_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})


class S3Error(Exception):
    """A request that failed for good, in one line: ``code`` is the store's error code (or the exception's name).

    ``transient`` says the store may well answer next time (throttling, 5xx, timeouts, a dropped
    connection), as opposed to a refusal that will repeat (AccessDenied, NoSuchBucket, bad credentials).
    """

    def __init__(self, message: str, *, code: str = "", transient: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.transient = transient


def describe(exc: BaseException, what: str) -> S3Error:
    """Turn a botocore failure of ``what`` (e.g. "ListObjectsV2 of s3://b/p/") into an S3Error."""
    if isinstance(exc, S3Error):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {}) or {}
        meta = exc.response.get("ResponseMetadata", {}) or {}
        status = meta.get("HTTPStatusCode") or 0
        code = str(error.get("Code") or status or "Error")
        message = str(error.get("Message") or "").strip()
        if not message and status:
            try:
                message = HTTPStatus(status).phrase
            except ValueError:
                message = f"HTTP {status}"
        attempts = int(meta.get("RetryAttempts") or 0) + 1
        tries = f"{attempts} attempts" if attempts > 1 else "1 attempt"
        transient = code in _TRANSIENT_CODES or status >= 500
        return S3Error(f"{code}: {message or 'no message'} ({what}; {tries})", code=code, transient=transient)
    if isinstance(exc, BotoCoreError):
        name = type(exc).__name__
        permanent = isinstance(exc, NoCredentialsError | PartialCredentialsError | ProfileNotFound)
        return S3Error(f"{name}: {exc} ({what})", code=name, transient=not permanent)
    return S3Error(f"{type(exc).__name__}: {exc} ({what})", code=type(exc).__name__, transient=True)


# --- clients ---------------------------------------------------------------------------------------


def check_credentials_ref(ref: str) -> str:
    """Return ``ref`` if it is a well-formed credentials reference, else raise ValueError saying what is allowed."""
    if not isinstance(ref, str) or not _CREDENTIALS_REF.match(ref):
        raise ValueError(
            "credentials must be a reference, not a secret: 'default' (boto3's own chain), 'profile:NAME' "
            "(a profile of the workers' AWS config) or 'file:NAME' (a JSON file in CKPTFLEET_S3_SECRETS_DIR)"
        )
    return ref


def _session(ref: str) -> boto3.Session:
    try:
        check_credentials_ref(ref)
    except ValueError as exc:
        raise S3Error(str(exc), code="BadCredentialsReference") from None
    if ref == "default":
        return boto3.Session()
    kind, _, name = ref.partition(":")
    if kind == "profile":
        try:
            return boto3.Session(profile_name=name)
        except ProfileNotFound:
            raise S3Error(
                f"the AWS profile {name!r} is not configured on this worker (AWS_CONFIG_FILE, ~/.aws/config)",
                code="ProfileNotFound",
            ) from None
    return boto3.Session(**_secrets_file(name))


def _secrets_file(name: str) -> dict[str, str]:
    """The keys in ``S3_SECRETS_DIR/name``. Messages name the file and the problem, never its content."""
    directory = settings.S3_SECRETS_DIR
    path = directory / name
    where = f"the S3 secrets file {name!r} in {directory} (CKPTFLEET_S3_SECRETS_DIR)"
    try:
        with path.open("rb") as f:
            raw = f.read(64 * 1024)
    except FileNotFoundError:
        raise S3Error(f"{where} does not exist on this worker", code="SecretsFileMissing") from None
    except OSError as exc:
        raise S3Error(f"{where} cannot be read: {exc.strerror or exc}", code="SecretsFileUnreadable") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise S3Error(f"{where} is not a JSON object", code="SecretsFileInvalid") from None
    if not isinstance(doc, dict):
        raise S3Error(f"{where} is not a JSON object", code="SecretsFileInvalid")
    keys = {}
    for key in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token"):
        value = doc.get(key)
        if value is None and key == "aws_session_token":
            continue
        if not isinstance(value, str) or not value:
            raise S3Error(f"{where} has no string {key!r}", code="SecretsFileInvalid")
        keys[key] = value
    return keys


def make_client(
    *, endpoint_url: str = "", region_name: str = "", addressing_style: str = "auto", credentials: str = "default"
) -> Any:
    """An S3 client for one store. Thread-safe: the scanner's listing and fetching threads share it."""
    config = Config(
        region_name=region_name or None,
        s3={"addressing_style": addressing_style or "auto"},
        retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        max_pool_connections=POOL_CONNECTIONS,
        # Only reads here. Checksums are asked for explicitly with HEAD; a ranged GET returns none to check.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        user_agent_appid=USER_AGENT_APPID,
    )
    session = _session(credentials)
    try:
        return session.client("s3", endpoint_url=endpoint_url or None, config=config)
    except (BotoCoreError, ValueError) as exc:
        raise S3Error(f"cannot make an S3 client: {type(exc).__name__}: {exc}", code=type(exc).__name__) from None


def client_for(bucket: Bucket) -> Any:
    """The client for a registered bucket: its endpoint, region, addressing style and credentials reference."""
    return make_client(
        endpoint_url=bucket.endpoint_url,
        region_name=bucket.region_name,
        addressing_style=bucket.addressing_style,
        credentials=bucket.credentials,
    )


def parse_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` as (bucket, prefix); the prefix ends with '/' unless empty. Raises ValueError."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket or any(c in bucket for c in " \\?#"):
        raise ValueError(f"{uri!r} names no bucket")
    prefix = prefix.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


# --- listing ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class ObjectInfo:
    """One object as a listing or an S3 Inventory report gives it (keys are full keys, not yet relative)."""

    key: str
    size: int
    last_modified: datetime
    etag: str = ""
    storage_class: str = ""
    checksum_algorithms: tuple[str, ...] = ()
    version_id: str = ""
    legal_hold: bool | None = None
    retain_until: datetime | None = None
    lock_known: bool = False  # the Object Lock state came with the object (an S3 Inventory report)


@dataclass(slots=True)
class Page:
    """One ListObjectsV2 answer: its objects, its common prefixes (with a delimiter), and whether more follow."""

    objects: list[ObjectInfo]
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def _etag(value: object) -> str:
    return str(value or "").strip().strip('"')


def _object(item: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(
        key=item["Key"],
        size=int(item.get("Size") or 0),
        last_modified=_utc(item["LastModified"]),
        etag=_etag(item.get("ETag")),
        storage_class=str(item.get("StorageClass") or ""),
        checksum_algorithms=tuple(item.get("ChecksumAlgorithm") or ()),
    )


def list_pages(
    client: Any, bucket: str, prefix: str, *, delimiter: str = "", page_size: int | None = None
) -> Iterator[Page]:
    """Every page of ListObjectsV2 below ``prefix``, through boto3's paginator. Raises S3Error mid-way on failure.

    botocore asks for URL-encoded keys and decodes them, so keys with characters XML 1.0 cannot carry
    (control characters) arrive intact.
    """
    kwargs: dict[str, Any] = {
        "Bucket": bucket,
        "Prefix": prefix,
        "PaginationConfig": {"PageSize": page_size or PAGE_SIZE},
    }
    if delimiter:
        kwargs["Delimiter"] = delimiter
    what = f"ListObjectsV2 of s3://{bucket}/{prefix}"
    try:
        for answer in client.get_paginator("list_objects_v2").paginate(**kwargs):
            yield Page(
                objects=[_object(item) for item in answer.get("Contents", ())],
                prefixes=[p["Prefix"] for p in answer.get("CommonPrefixes", ()) if p.get("Prefix")],
                truncated=bool(answer.get("IsTruncated")),
            )
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


def newest_key(client: Any, bucket: str, prefix: str, *, suffix: str) -> ObjectInfo | None:
    """The most recently written object below ``prefix`` whose key ends with ``suffix`` (ties: the greatest key)."""
    best: ObjectInfo | None = None
    for page in list_pages(client, bucket, prefix):
        for obj in page.objects:
            if obj.key.endswith(suffix) and (
                best is None or (obj.last_modified, obj.key) > (best.last_modified, best.key)
            ):
                best = obj
    return best


@dataclass(slots=True)
class UploadInfo:
    """An incomplete multipart upload; ``parts`` and ``bytes`` are None when its parts could not be listed."""

    key: str
    upload_id: str
    initiated: datetime | None
    storage_class: str
    parts: int | None = None
    bytes: int | None = None


def multipart_uploads(client: Any, bucket: str, prefix: str) -> list[UploadInfo] | None:
    """Every incomplete multipart upload below ``prefix`` with its parts counted and summed.

    None when the store or the policy does not offer the listing (AccessDenied, NotImplemented):
    the uploads are then unknown, which is not the same as none. Other failures raise S3Error.
    """
    uploads: list[UploadInfo] = []
    what = f"ListMultipartUploads of s3://{bucket}/{prefix}"
    try:
        for answer in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
            for item in answer.get("Uploads", ()):
                initiated = item.get("Initiated")
                uploads.append(
                    UploadInfo(
                        key=item["Key"],
                        upload_id=item["UploadId"],
                        initiated=_utc(initiated) if isinstance(initiated, datetime) else None,
                        storage_class=str(item.get("StorageClass") or ""),
                    )
                )
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, what)
        if error.code in _UNSUPPORTED_CODES:
            log.warning("incomplete multipart uploads of s3://%s/%s are unknown: %s", bucket, prefix, error)
            return None
        raise error from None
    present = []
    for upload in uploads:
        try:
            parts = 0
            total = 0
            for answer in client.get_paginator("list_parts").paginate(
                Bucket=bucket, Key=upload.key, UploadId=upload.upload_id
            ):
                for part in answer.get("Parts", ()):
                    parts += 1
                    total += int(part.get("Size") or 0)
            upload.parts, upload.bytes = parts, total
        except (ClientError, BotoCoreError) as exc:
            error = describe(exc, f"ListParts of {upload.key}")
            if error.code == "NoSuchUpload":
                continue  # completed or aborted since it was listed
            if error.transient:
                raise error from None
        present.append(upload)
    return present


# --- one object -----------------------------------------------------------------------------------


@dataclass(slots=True)
class HeadInfo:
    """What HEAD says about one object: its stored checksum, version and Object Lock state."""

    checksum: str = ""
    checksum_algo: str = ""
    version_id: str = ""
    legal_hold: bool | None = None
    retain_until: datetime | None = None


def stored_checksum(answer: dict[str, Any]) -> tuple[str, str]:
    """(value, algorithm) of the checksum a HEAD answer carries, or ("", "").

    A full-object checksum becomes lowercase hex under its algorithm's name ("sha256", "crc32c", ...),
    comparable with what a writer or the agent computed. A composite one (a multipart object's checksum
    of its parts' checksums, shown by S3 as ``base64-N``) is no digest of the content, so it keeps the
    store's text under ``<algorithm>-composite``. Stores that do not say which kind they return
    (no ChecksumType) get the benefit of no doubt: S3 computes SHA and, by default, CRC checksums of
    a multipart object (its ETag ends in ``-N``) part by part.
    """
    kind = str(answer.get("ChecksumType") or "").upper()
    multipart = bool(_MULTIPART_ETAG.search(_etag(answer.get("ETag"))))
    for name, algo, length in _CHECKSUM_FIELDS:
        value = answer.get(name)
        if not isinstance(value, str) or not value:
            continue
        encoded, dash, _parts = value.partition("-")
        composite = kind == "COMPOSITE" or bool(dash) or (kind != "FULL_OBJECT" and multipart and algo != "crc64nvme")
        if composite:
            label = f"{algo}-composite"
            return (value[:128], label) if len(label) <= CHECKSUM_ALGO_MAX else ("", "")
        try:
            digest = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(digest) == length:
            return digest.hex(), algo
    return "", ""


def head(client: Any, bucket: str, key: str, *, etag: str = "") -> HeadInfo | None:
    """HEAD one object with ChecksumMode ENABLED. None when it is gone or changed since it was listed.

    ``etag`` makes the request conditional, so a checksum is never paired with another version's size.
    """
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "ChecksumMode": "ENABLED"}
    if etag:
        kwargs["IfMatch"] = f'"{_etag(etag)}"'
    try:
        answer = client.head_object(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"HeadObject of {key}")
        if error.code in _GONE_CODES:
            return None
        raise error from None
    checksum, algo = stored_checksum(answer)
    hold = answer.get("ObjectLockLegalHoldStatus")
    until = answer.get("ObjectLockRetainUntilDate")
    return HeadInfo(
        checksum=checksum,
        checksum_algo=algo,
        version_id=str(answer.get("VersionId") or ""),
        legal_hold=None if hold is None else str(hold).upper() == "ON",
        retain_until=_utc(until) if isinstance(until, datetime) else None,
    )


class RangedReader:
    """A seekable, read-only binary file over one object, read with ranged GETs, never whole.

    Each read that misses the buffer is one GET of at least ``READ_AHEAD`` bytes (clipped to the
    object), conditional on the listed ETag so that a rewrite mid-read fails instead of mixing
    versions. Failures raise OSError, which the facts extractors turn into an ``error`` fact; the
    S3Error behind it stays in ``error`` so the caller can tell a refusal from a store that is down.
    """

    def __init__(
        self, client: Any, bucket: str, key: str, size: int, *, etag: str = "", read_ahead: int = READ_AHEAD
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.size = size
        self.etag = _etag(etag)
        self.read_ahead = read_ahead
        self.requests = 0
        self.bytes_fetched = 0
        self.error: S3Error | None = None
        self._pos = 0
        self._buf = b""
        self._buf_start = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        target = base + offset
        if target < 0:
            raise ValueError("negative seek position")
        self._pos = target
        return target

    def read(self, n: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed reader")
        end = self.size if n is None or n < 0 else min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        buf_end = self._buf_start + len(self._buf)
        if not (self._buf_start <= self._pos and end <= buf_end):
            self._fetch(self._pos, min(self.size, max(end, self._pos + self.read_ahead)))
        data = self._buf[self._pos - self._buf_start : end - self._buf_start]
        self._pos += len(data)
        return data

    def _fetch(self, start: int, end: int) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key, "Range": f"bytes={start}-{end - 1}"}
        if self.etag:
            kwargs["IfMatch"] = f'"{self.etag}"'
        self.requests += 1
        try:
            answer = self.client.get_object(**kwargs)
            body = answer["Body"]
            try:
                status = answer.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 200 and start > 0:
                    # The store ignored Range and is sending the whole object: refuse to download it.
                    raise S3Error(f"the store ignored the Range header of GetObject of {self.key}", code="NoRange")
                data = body.read(end - start)
            finally:
                body.close()
        except (ClientError, BotoCoreError, S3Error) as exc:
            self.error = describe(exc, f"GetObject of {self.key}")
            raise OSError(self.error.message) from None
        if len(data) != end - start:
            self.error = S3Error(
                f"GetObject of {self.key} returned {len(data)} bytes for a range of {end - start}",
                code="ShortRead",
                transient=True,
            )
            raise OSError(self.error.message)
        self.bytes_fetched += len(data)
        self._buf, self._buf_start = data, start

    def close(self) -> None:
        self.closed = True
        self._buf = b""

    def __enter__(self) -> RangedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def get_small(client: Any, bucket: str, key: str, *, limit: int = MAX_SMALL_OBJECT) -> bytes | None:
    """The whole content of a small object (a manifest), or None when there is no such key."""
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
        body = answer["Body"]
        try:
            length = int(answer.get("ContentLength") or 0)
            if length > limit:
                raise S3Error(f"s3://{bucket}/{key} is {length} bytes, over the {limit}-byte limit", code="TooLarge")
            return body.read(limit + 1)[:limit]
        finally:
            body.close()
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"GetObject of s3://{bucket}/{key}")
        if error.code in ("NoSuchKey", "404"):
            return None
        raise error from None


def download(client: Any, bucket: str, key: str, out: IO[bytes]) -> str:
    """Stream an object into ``out`` and return the MD5 (hex) of what was written."""
    md5 = hashlib.md5(usedforsecurity=False)
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
        body = answer["Body"]
        try:
            for chunk in body.iter_chunks(1024 * 1024):
                md5.update(chunk)
                out.write(chunk)
        finally:
            body.close()
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"GetObject of s3://{bucket}/{key}") from None
    return md5.hexdigest()


# --- the bucket -----------------------------------------------------------------------------------


def bucket_versioning(client: Any, bucket: str) -> str | None:
    """The versioning status: Enabled, Suspended, "" (never enabled; a store without it), None when refused."""
    try:
        answer = client.get_bucket_versioning(Bucket=bucket)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"GetBucketVersioning of {bucket}")
        if error.code in _NOT_IMPLEMENTED_CODES:
            return ""
        if error.code in _UNSUPPORTED_CODES:
            return None
        raise error from None
    return str(answer.get("Status") or "")


def bucket_object_lock(client: Any, bucket: str) -> bool | None:
    """Whether Object Lock is enabled on the bucket (False on stores without it), or None when refused."""
    try:
        answer = client.get_object_lock_configuration(Bucket=bucket)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"GetObjectLockConfiguration of {bucket}")
        if error.code == "ObjectLockConfigurationNotFoundError" or error.code in _NOT_IMPLEMENTED_CODES:
            return False
        if error.code in _UNSUPPORTED_CODES:
            return None
        raise error from None
    return (answer.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled") == "Enabled"
