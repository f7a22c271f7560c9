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
import os
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import IO, TYPE_CHECKING, Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.parsers import ResponseParserFactory, RestXMLParser
from botocore.utils import parse_timestamp
from django.conf import settings

from fleet.choices import DeleteCondition

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
_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")  # a single-part ETag; a multipart one ends in -N
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
UNSUPPORTED_CODES = _UNSUPPORTED_CODES
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


# botocore's data (the S3 service model, endpoints, partitions: megabytes of JSON), loaded once per process. A new
# botocore session loads it again, which cost 164 ms of CPU per client, against 17 ms with this shared loader
# (measured 2026-12-08, boto3 in this venv). Each client still gets a session of its own, so credentials (a
# secrets file rotated, a profile changed) are read afresh every time; the loader holds only the read-only models.
class _PathsOnce(list):
    """The shared loader's search folders: boto3 appends its own data folder for every Session, once is enough."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


DATA_LOADER = botocore.loaders.Loader(
    # As botocore.loaders.create_loader: AWS_DATA_PATH's folders first, then botocore's own.
    extra_search_paths=_PathsOnce(
        os.path.expanduser(os.path.expandvars(path))
        for path in os.environ.get("AWS_DATA_PATH", "").split(os.pathsep)
        if path
    )
)


def _botocore_session() -> botocore.session.Session:
    session = botocore.session.get_session()
    session.register_component("data_loader", DATA_LOADER)
    return session


def _session(ref: str) -> boto3.Session:
    try:
        check_credentials_ref(ref)
    except ValueError as exc:
        raise S3Error(str(exc), code="BadCredentialsReference") from None
    if ref == "default":
        return boto3.Session(botocore_session=_botocore_session())
    kind, _, name = ref.partition(":")
    if kind == "profile":
        try:
            session = _botocore_session()
            if name not in session.available_profiles:
                raise ProfileNotFound(profile=name)
            return boto3.Session(profile_name=name, botocore_session=session)
        except ProfileNotFound:
            raise S3Error(
                f"the AWS profile {name!r} is not configured on this worker (AWS_CONFIG_FILE, ~/.aws/config)",
                code="ProfileNotFound",
            ) from None
    return boto3.Session(**_secrets_file(name), botocore_session=_botocore_session())


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


def _timestamp(value: Any) -> datetime:
    """botocore's timestamp parser, with S3's ISO 8601 listing times (``2026-11-22T01:02:03.000Z``) read natively.

    botocore parses every ``LastModified`` of a listing with dateutil, about half of a listing
    thread's CPU; ``datetime.fromisoformat`` (Python 3.11 reads the ``Z``) is ten times cheaper.
    Anything else (HEAD's RFC 1123 ``Last-Modified``, epoch numbers) goes to botocore as before.
    """
    if isinstance(value, str) and len(value) >= 20 and value[4] == "-" and value[10] == "T":
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return parse_timestamp(value)


class _Unexpected(Exception):
    """An element the fast ListObjectsV2 reader does not know: botocore's own parser reads the page instead."""


# ListObjectsV2's top-level elements by type (botocore's model); Contents and CommonPrefixes are lists.
_LIST_V2_TEXT = frozenset(
    {"Name", "Prefix", "Delimiter", "EncodingType", "ContinuationToken", "NextContinuationToken", "StartAfter"}
)
_LIST_V2_INT = frozenset({"MaxKeys", "KeyCount"})


def _tag(node: Any) -> str:
    tag = node.tag
    return tag[tag.index("}") + 1 :] if tag[:1] == "{" else tag


class _ListingParser(RestXMLParser):
    """botocore's REST-XML parser, reading ListObjectsV2 pages directly rather than through the model.

    botocore's parser walks the model shape by shape for each of a page's thousand objects, most of
    a listing thread's CPU. The page's XML is parsed the same way (botocore's own XML parser); its
    elements are then read into the same dictionary botocore would return. Anything it does not
    know (an element added to the API, an owner or restore status) hands the page to botocore's
    parser, so the answer is always botocore's. Every other operation is botocore's as it is.
    """

    def _parse_payload(self, response: dict, shape: Any, member_shapes: Any, final_parsed: dict) -> None:
        if shape is not None and shape.name == "ListObjectsV2Output" and response["body"]:
            try:
                final_parsed.update(self._list_v2(self._initial_body_parse(response["body"])))
                return
            except (_Unexpected, ValueError, TypeError, AttributeError):
                pass
        super()._parse_payload(response, shape, member_shapes, final_parsed)

    def _list_v2(self, root: Any) -> dict[str, Any]:
        if _tag(root) != "ListBucketResult":
            raise _Unexpected(root.tag)
        out: dict[str, Any] = {}
        contents: list[dict[str, Any]] = []
        prefixes: list[dict[str, Any]] = []
        timestamp = self._timestamp_parser
        for child in root:
            tag = _tag(child)
            if tag == "Contents":
                item: dict[str, Any] = {}
                algorithms: list[str] = []
                for node in child:
                    name = _tag(node)
                    if len(node):
                        raise _Unexpected(name)  # a structure (Owner, RestoreStatus): botocore's parser
                    text = node.text or ""
                    if name in ("Key", "ETag", "StorageClass", "ChecksumType"):
                        item[name] = text
                    elif name == "LastModified":
                        item[name] = timestamp(text)
                    elif name == "Size":
                        item[name] = int(text)
                    elif name == "ChecksumAlgorithm":
                        algorithms.append(text)
                    else:
                        raise _Unexpected(name)
                if algorithms:
                    item["ChecksumAlgorithm"] = algorithms
                contents.append(item)
            elif tag == "CommonPrefixes":
                entry: dict[str, Any] = {}
                for node in child:
                    if _tag(node) != "Prefix" or len(node):
                        raise _Unexpected(_tag(node))
                    entry["Prefix"] = node.text or ""
                prefixes.append(entry)
            elif len(child):
                raise _Unexpected(tag)
            elif tag in _LIST_V2_TEXT:
                out[tag] = child.text or ""
            elif tag in _LIST_V2_INT:
                out[tag] = int(child.text or "")
            elif tag == "IsTruncated":
                out[tag] = (child.text or "") == "true"
            else:
                raise _Unexpected(tag)
        if contents:
            out["Contents"] = contents
        if prefixes:
            out["CommonPrefixes"] = prefixes
        return out


class _ParserFactory(ResponseParserFactory):
    """botocore's parser factory, with ``_ListingParser`` for REST-XML (S3)."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "rest-xml":
            return _ListingParser(**self._defaults)
        return super().create_parser(protocol_name)


def make_client(
    *, endpoint_url: str = "", region_name: str = "", addressing_style: str = "auto", credentials: str = "default"
) -> Any:
    """An S3 client for one store. Thread-safe: the scanner's listing and fetching threads share it."""
    config = Config(
        region_name=region_name or None,
        s3={"addressing_style": addressing_style or "auto"},
        # SigV4 for presigned URLs too (botocore may pick the deprecated SigV2 for them): a URL an agent
        # uploads with signs the headers it must send (If-None-Match, the checksum) and works in every region.
        signature_version="s3v4",
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
    # A component of this session's own botocore session: no other client is affected.
    factory = _ParserFactory()
    factory.set_parser_defaults(timestamp_parser=_timestamp)
    session._session.register_component("response_parser_factory", factory)
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
class VersionInfo:
    """A non-current version of an object (or a delete marker, which has no bytes) in a versioned bucket."""

    key: str
    version_id: str
    size: int
    last_modified: datetime
    etag: str = ""
    storage_class: str = ""
    delete_marker: bool = False
    latest: bool = False

    @classmethod
    def of_version(cls, item: dict) -> VersionInfo:
        """One entry of ListObjectVersions' ``Versions``."""
        return cls(
            key=item["Key"],
            version_id=str(item.get("VersionId") or ""),
            size=int(item.get("Size") or 0),
            last_modified=_utc(item["LastModified"]),
            etag=_etag(item.get("ETag")),
            storage_class=str(item.get("StorageClass") or ""),
            latest=bool(item.get("IsLatest")),
        )

    @classmethod
    def of_marker(cls, item: dict) -> VersionInfo:
        """One entry of ListObjectVersions' ``DeleteMarkers``: no bytes."""
        return cls(
            key=item["Key"],
            version_id=str(item.get("VersionId") or ""),
            size=0,
            last_modified=_utc(item["LastModified"]),
            delete_marker=True,
            latest=bool(item.get("IsLatest")),
        )


def key_versions(client: Any, bucket: str, key: str, *, markers: bool = False) -> list[VersionInfo]:
    """Every version of exactly ``key`` (current and non-current, delete markers left out unless ``markers``),
    newest first (with markers: versions newest first, then the markers; ``latest`` says which one is current).

    A deletion frozen before the scan's HEAD pass gave its objects their version ids looks the
    version up here, by the content it froze (size, ETag, time), rather than sending a version-less
    delete, which a versioned bucket answers with a delete marker and keeps the data. Raises S3Error.
    """
    what = f"ListObjectVersions of s3://{bucket}/{key}"
    found: list[VersionInfo] = []
    try:
        for answer in client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=key, PaginationConfig={"PageSize": PAGE_SIZE}
        ):
            found.extend(VersionInfo.of_version(item) for item in answer.get("Versions", ()) if item.get("Key") == key)
            if markers:
                found.extend(
                    VersionInfo.of_marker(item) for item in answer.get("DeleteMarkers", ()) if item.get("Key") == key
                )
            keys = [item.get("Key", "") for item in (*answer.get("Versions", ()), *answer.get("DeleteMarkers", ()))]
            if keys and max(keys) > key:
                break  # listed in key order: everything further is another key that starts with this one
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None
    return found


def versions_of_keys(client: Any, bucket: str, keys: list[str]) -> dict[str, list[VersionInfo]]:
    """Every version (not the delete markers) of each of ``keys``, newest first, by key: one paginated
    ListObjectVersions per directory of the keys (the part of the key up to its last "/"), not one per key.

    A job's version-less items are the shards of a few checkpoint directories: a 4,001-item job asked one
    listing per item (4,001 requests, each made to walk the versions of its key); here it asks one listing
    per directory, a page per ``PAGE_SIZE`` versions, stopping past the directory's last wanted key.
    Keys of a nested directory listed on the way are not wanted and left out. Raises S3Error.
    """
    by_dir: dict[str, set[str]] = {}
    for key in keys:
        by_dir.setdefault(key[: key.rfind("/") + 1], set()).add(key)
    found: dict[str, list[VersionInfo]] = {key: [] for key in keys}
    for prefix, wanted in sorted(by_dir.items()):
        last = max(wanted)
        what = f"ListObjectVersions of s3://{bucket}/{prefix}"
        try:
            for answer in client.get_paginator("list_object_versions").paginate(
                Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": PAGE_SIZE}
            ):
                for item in answer.get("Versions", ()):
                    if item.get("Key") in wanted:
                        found[item["Key"]].append(VersionInfo.of_version(item))
                listed = [i.get("Key", "") for i in (*answer.get("Versions", ()), *answer.get("DeleteMarkers", ()))]
                if listed and max(listed) > last:
                    break  # listed in key order: everything further is past the last key wanted here
        except (ClientError, BotoCoreError) as exc:
            raise describe(exc, what) from None
    return found


def noncurrent_versions(client: Any, bucket: str, prefix: str) -> Iterator[list[VersionInfo]]:
    """Every non-current version and non-current delete marker below ``prefix``, a page at a time.

    Current versions are left out: the object listing has them. Non-current versions are billed
    like any object of their storage class, though no listing of objects shows them. Raises S3Error
    (AccessDenied included: the caller decides what an unknown means).
    """
    what = f"ListObjectVersions of s3://{bucket}/{prefix}"
    try:
        for answer in client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": PAGE_SIZE}
        ):
            page = [VersionInfo.of_version(item) for item in answer.get("Versions", ()) if not item.get("IsLatest")]
            page.extend(
                VersionInfo.of_marker(item) for item in answer.get("DeleteMarkers", ()) if not item.get("IsLatest")
            )
            yield page
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


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
    """What HEAD says about one object: its stored checksum, version and Object Lock state.

    ``checksum``/``checksum_algo`` is the one main checksum (``stored_checksum``); ``digests`` every
    checksum the store keeps, in the shape of ``catalog.digests`` (``stored_digests``), empty when it
    keeps none.
    """

    checksum: str = ""
    checksum_algo: str = ""
    version_id: str = ""
    legal_hold: bool | None = None
    retain_until: datetime | None = None
    digests: dict[str, Any] = field(default_factory=dict)


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


def stored_digests(answer: dict[str, Any], *, now: float) -> dict[str, Any]:
    """Every checksum a HEAD answer carries, as ``catalog.digests`` stores them; {} when it carries none.

    Full-object checksums become lowercase hex under their algorithm's name. A composite one (a
    multipart object's checksum of its parts' checksums) becomes ``{"composite": {"algo", "value",
    "parts", "part_size"}}``, ``value`` the hex of the checksum without S3's ``-N`` and ``part_size``
    0 (``head`` asks for it). Composite: S3 says so (``ChecksumType``), or the value ends in ``-N``,
    or, from a store that says neither (moto), the ETag ends in ``-N`` and the algorithm is not
    CRC64NVME (which S3 keeps only whole: "Checking object integrity", AWS S3 user guide). The ETag is
    kept as ``md5`` only where it is the content's MD5: a single-part upload not encrypted with KMS
    (SSE-KMS, DSSE-KMS) or a customer key (SSE-C), whose ETags are not MD5s. ``at`` is ``now``, the
    time of the HEAD; ``taken`` the object's LastModified, when the store computed its checksums.
    """
    out: dict[str, Any] = {}
    kind = str(answer.get("ChecksumType") or "").upper()
    etag = _etag(answer.get("ETag"))
    etag_parts = etag.rpartition("-")[2] if _MULTIPART_ETAG.search(etag) else ""
    for name, algo, length in _CHECKSUM_FIELDS:
        value = answer.get(name)
        if not isinstance(value, str) or not value:
            continue
        encoded, dash, parts = value.partition("-")
        try:
            digest = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(digest) != length:
            continue
        if kind == "COMPOSITE" or dash or (kind != "FULL_OBJECT" and etag_parts and algo != "crc64nvme"):
            count = parts if parts.isdigit() else etag_parts
            composite = {"algo": algo, "value": digest.hex(), "parts": int(count or 0), "part_size": 0}
            out.setdefault("composite", composite)  # S3 keeps one checksum: a second would be a store's oddity
        else:
            out[algo] = digest.hex()
    encryption = str(answer.get("ServerSideEncryption") or "").lower()
    if _MD5.match(etag) and not encryption.startswith("aws:kms") and not answer.get("SSECustomerAlgorithm"):
        out["md5"] = etag.lower()
    if not out:
        return out
    out["at"] = round(now, 3)
    modified = answer.get("LastModified")
    if isinstance(modified, datetime):
        out["taken"] = round(_utc(modified).timestamp(), 3)
    return out


def _part_size(client: Any, bucket: str, key: str, answer: dict[str, Any], composite: dict[str, Any]) -> None:
    """Fill a composite's ``part_size`` (and ``parts`` when unknown) from a HEAD of part 1; left 0 when refused.

    Every part but the last has the size of part 1, as boto3, the aws CLI, s5cmd and rclone upload; a
    part 1 that cannot be such a layout's (too small or too big for the part count) is no part size.
    S3's GetObjectAttributes(ObjectParts) would list every part's size, but moto does not implement
    it; HEAD with PartNumber works on both. Not conditional on the ETag: moto compares If-Match with
    the part's own ETag, which it also answers with. The version HEADed is asked for where there is
    one; elsewhere an answer with another multipart ETag (S3 answers with the object's) is another
    object's, and a rewrite in between is seen by the next scan as a change, HEADed again.
    """
    size = int(answer.get("ContentLength") or 0)
    parts = composite["parts"]
    if parts == 1:
        composite["part_size"] = size
        return
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "PartNumber": 1}
    if answer.get("VersionId") and answer.get("VersionId") != "null":
        kwargs["VersionId"] = answer["VersionId"]
    try:
        part = client.head_object(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        log.info("the part size of %s is unknown: %s", key, describe(exc, f"HeadObject of part 1 of {key}"))
        return
    etag = _etag(part.get("ETag"))
    if _MULTIPART_ETAG.search(etag) and etag != _etag(answer.get("ETag")):
        return
    count = part.get("PartsCount")
    if not parts and isinstance(count, int) and count > 0:
        composite["parts"] = parts = count
    first = int(part.get("ContentLength") or 0)
    if parts > 0 and first > 0 and -(-size // first) == parts:
        composite["part_size"] = first


def head(client: Any, bucket: str, key: str, *, etag: str = "") -> HeadInfo | None:
    """HEAD one object with ChecksumMode ENABLED. None when it is gone or changed since it was listed.

    ``etag`` makes the request conditional, so a checksum is never paired with another version's size.
    An object with a composite checksum costs a second HEAD, of its part 1, for the part size the
    composite was computed over (``_part_size``).
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
    digests = stored_digests(answer, now=time.time())
    composite = digests.get("composite")
    if composite is not None:
        _part_size(client, bucket, key, answer, composite)
    hold = answer.get("ObjectLockLegalHoldStatus")
    until = answer.get("ObjectLockRetainUntilDate")
    return HeadInfo(
        checksum=checksum,
        checksum_algo=algo,
        version_id=str(answer.get("VersionId") or ""),
        legal_hold=None if hold is None else str(hold).upper() == "ON",
        retain_until=_utc(until) if isinstance(until, datetime) else None,
        digests=digests,
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


def abort_uploads_days(client: Any, bucket: str, prefix: str) -> int | None:
    """The DaysAfterInitiation of an enabled AbortIncompleteMultipartUpload lifecycle rule that covers every key
    below ``prefix`` (its filter's prefix is a prefix of ``prefix``), the smallest if several; 0 when the bucket has
    no such rule (or no lifecycle configuration); None when it could not be read. One request; advisory, so a
    failure never fails the scan that asks."""
    try:
        answer = client.get_bucket_lifecycle_configuration(Bucket=bucket)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"GetBucketLifecycleConfiguration of {bucket}")
        if error.code == "NoSuchLifecycleConfiguration":
            return 0
        log.info("the lifecycle configuration of %s is unknown: %s", bucket, error.message)
        return None
    days = []
    for rule in answer.get("Rules", ()):
        abort = (rule.get("AbortIncompleteMultipartUpload") or {}).get("DaysAfterInitiation")
        if rule.get("Status") != "Enabled" or not isinstance(abort, int):
            continue
        where = rule.get("Filter") or {}
        scope = where.get("Prefix", (where.get("And") or {}).get("Prefix", rule.get("Prefix", "")))
        if prefix.startswith(scope or ""):
            days.append(abort)
    return min(days) if days else 0


# --- Object Lock legal holds (the one write here besides deletions) ---------------------------------


def set_legal_hold(client: Any, bucket: str, key: str, *, on: bool, version_id: str = "") -> None:
    """Turn the Object Lock legal hold of one object (version) ON or OFF. Raises S3Error when the store refuses.

    A legal hold has no expiry: while ON, the store refuses to delete or overwrite that version,
    whoever asks. It is how a hold in the catalog reaches the bucket (``actions.objectlock``).
    """
    what = f"PutObjectLegalHold {'ON' if on else 'OFF'} of s3://{bucket}/{key}"
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "LegalHold": {"Status": "ON" if on else "OFF"}}
    if version_id:
        kwargs["VersionId"] = version_id
    try:
        client.put_object_legal_hold(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


RETENTION_MODES = ("GOVERNANCE", "COMPLIANCE")


def set_retention(
    client: Any,
    bucket: str,
    key: str,
    *,
    mode: str,
    until: datetime,
    version_id: str = "",
    bypass_governance: bool = False,
) -> None:
    """Set the Object Lock retention of one object (version): ``mode`` GOVERNANCE or COMPLIANCE until ``until``.

    Until that date the store refuses to delete or overwrite that version; under COMPLIANCE nobody can
    shorten the date or remove it, the account's root included, and under GOVERNANCE only a request that
    says ``x-amz-bypass-governance-retention`` with the s3:BypassGovernanceRetention permission can. Moving
    a version from GOVERNANCE to COMPLIANCE needs that bypass too (``bypass_governance``). Raises S3Error
    when the store refuses (a COMPLIANCE date cannot be moved earlier, for one).
    """
    if mode not in RETENTION_MODES:
        raise ValueError(f"Object Lock retention mode must be one of {RETENTION_MODES}, not {mode!r}")
    what = f"PutObjectRetention {mode} until {until:%Y-%m-%dT%H:%M:%SZ} of s3://{bucket}/{key}"
    kwargs: dict[str, Any] = {
        "Bucket": bucket,
        "Key": key,
        "Retention": {"Mode": mode, "RetainUntilDate": _utc(until).replace(microsecond=0)},
    }
    if version_id:
        kwargs["VersionId"] = version_id
    if bypass_governance:
        kwargs["BypassGovernanceRetention"] = True
    try:
        client.put_object_retention(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


def lift_retention(client: Any, bucket: str, key: str, *, version_id: str = "") -> None:
    """Remove a GOVERNANCE retention from one object (version), with ``x-amz-bypass-governance-retention``.

    An empty retention with the bypass header is how S3 removes a governance-mode retention; a
    COMPLIANCE one cannot be removed and the store refuses (raised as S3Error).
    """
    what = f"PutObjectRetention (lift GOVERNANCE) of s3://{bucket}/{key}"
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "Retention": {}, "BypassGovernanceRetention": True}
    if version_id:
        kwargs["VersionId"] = version_id
    try:
        client.put_object_retention(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


# --- promotion: restores and server-side copies ----------------------------------------------------
# The only writes in this module, used by ``promotion.runner``: a restore request makes a temporary
# readable copy of an archived object; a copy writes a new object (or the same key in a hotter class).
# Neither deletes anything.

MULTIPART_COPY_THRESHOLD = 5 * 1024**3  # CopyObject's own limit: larger objects must be copied in parts
MULTIPART_COPY_PART_SIZE = 512 * 1024**2
_RESTORE_HEADER = re.compile(r'ongoing-request="(?P<ongoing>true|false)"(?:,\s*expiry-date="(?P<expiry>[^"]+)")?')


@dataclass(slots=True)
class ObjectState:
    """What HEAD says about an object a promotion reads or writes.

    ``restore`` is None when no restore was ever asked for, "ongoing" while one runs, "available"
    once the restored copy can be read (until ``restore_expiry``).
    """

    size: int
    etag: str
    storage_class: str
    version_id: str = ""
    restore: str | None = None
    restore_expiry: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def object_state(client: Any, bucket: str, key: str, *, version_id: str = "") -> ObjectState | None:
    """HEAD one object (a version, if given): None when there is no such key."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        kwargs["VersionId"] = version_id
    try:
        answer = client.head_object(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"HeadObject of s3://{bucket}/{key}")
        if error.code in ("NoSuchKey", "404", "NotFound", "NoSuchVersion"):
            return None
        raise error from None
    restore, expiry = None, ""
    match = _RESTORE_HEADER.search(str(answer.get("Restore") or ""))
    if match:
        restore = "ongoing" if match["ongoing"] == "true" else "available"
        expiry = match["expiry"] or ""
    return ObjectState(
        size=int(answer.get("ContentLength") or 0),
        etag=_etag(answer.get("ETag")),
        storage_class=str(answer.get("StorageClass") or "STANDARD"),
        version_id=str(answer.get("VersionId") or ""),
        restore=restore,
        restore_expiry=expiry,
        metadata={str(k).lower(): str(v) for k, v in (answer.get("Metadata") or {}).items()},
    )


def restore_request(
    client: Any, bucket: str, key: str, *, days: int, tier: str = "Standard", version_id: str = ""
) -> str:
    """Ask the store to restore an archived object for ``days``: "started", "ongoing" or "available".

    "ongoing" when a restore was already under way (RestoreAlreadyInProgress), "available" when the
    object is readable already (S3 answers 200 instead of 202 and only extends the expiry).
    """
    kwargs: dict[str, Any] = {
        "Bucket": bucket,
        "Key": key,
        "RestoreRequest": {"Days": int(days), "GlacierJobParameters": {"Tier": tier}},
    }
    if version_id:
        kwargs["VersionId"] = version_id
    try:
        answer = client.restore_object(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"RestoreObject of s3://{bucket}/{key}")
        if error.code == "RestoreAlreadyInProgress":
            return "ongoing"
        raise error from None
    status = (answer.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return "available" if status == 200 else "started"


def copy_object(
    client: Any,
    *,
    source_bucket: str,
    source_key: str,
    target_bucket: str,
    target_key: str,
    size: int,
    storage_class: str,
    source_etag: str = "",
    source_version_id: str = "",
    metadata: dict[str, str] | None = None,
    threshold: int | None = None,
    part_size: int | None = None,
    on_progress: Any = None,
    checksum_algorithm: str = "",
) -> str:
    """Copy one object server-side and return the new object's ETag.

    At or below ``threshold`` one CopyObject; above it a multipart copy (UploadPartCopy of
    ``part_size`` ranges), aborted if any part fails so no billed parts are left behind. Every read
    of the source is conditional on ``source_etag``, so a source rewritten mid-copy fails the copy
    instead of mixing versions. ``metadata`` replaces the source's user metadata; ``on_progress``
    is called with the bytes of each part as it lands. ``checksum_algorithm`` ("SHA256") asks the store to
    compute and keep that checksum of the new object, so it can be verified without reading it back.
    """
    threshold = MULTIPART_COPY_THRESHOLD if threshold is None else threshold
    part_size = part_size or MULTIPART_COPY_PART_SIZE
    source: dict[str, Any] = {"Bucket": source_bucket, "Key": source_key}
    if source_version_id:
        source["VersionId"] = source_version_id
    condition = {"CopySourceIfMatch": f'"{_etag(source_etag)}"'} if source_etag else {}
    what = f"copy of s3://{source_bucket}/{source_key} to s3://{target_bucket}/{target_key}"
    if size <= threshold:
        kwargs: dict[str, Any] = {
            "Bucket": target_bucket,
            "Key": target_key,
            "CopySource": source,
            "StorageClass": storage_class or "STANDARD",
            **condition,
        }
        if checksum_algorithm:
            kwargs["ChecksumAlgorithm"] = checksum_algorithm
        if metadata is not None:
            kwargs.update(Metadata=metadata, MetadataDirective="REPLACE")
        try:
            answer = client.copy_object(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise describe(exc, f"CopyObject ({what})") from None
        if on_progress:
            on_progress(size)
        return _etag((answer.get("CopyObjectResult") or {}).get("ETag"))
    try:
        upload = client.create_multipart_upload(
            Bucket=target_bucket,
            Key=target_key,
            StorageClass=storage_class or "STANDARD",
            Metadata=metadata or {},
            **({"ChecksumAlgorithm": checksum_algorithm} if checksum_algorithm else {}),
        )
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"CreateMultipartUpload ({what})") from None
    upload_id = upload["UploadId"]
    parts = []
    try:
        for number, start in enumerate(range(0, size, part_size), start=1):
            end = min(size, start + part_size) - 1
            answer = client.upload_part_copy(
                Bucket=target_bucket,
                Key=target_key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource=source,
                CopySourceRange=f"bytes={start}-{end}",
                **condition,
            )
            parts.append({"PartNumber": number, "ETag": (answer.get("CopyPartResult") or {}).get("ETag")})
            if on_progress:
                on_progress(end - start + 1)
        answer = client.complete_multipart_upload(
            Bucket=target_bucket, Key=target_key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"multipart {what}")
        try:
            client.abort_multipart_upload(Bucket=target_bucket, Key=target_key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as abort_exc:
            log.warning("abort of upload %s of %s failed: %s", upload_id, target_key, describe(abort_exc, "abort"))
        raise error from None
    return _etag(answer.get("ETag"))


PRESIGN_SECONDS = 3600
PRESIGN_MAX_SECONDS = 7 * 24 * 3600  # SigV4's own limit


def presign_get(client: Any, bucket: str, key: str, *, version_id: str = "", expires: int = PRESIGN_SECONDS) -> str:
    """A URL that lets whoever holds it GET one object (that version, if given) for ``expires`` seconds.

    Signed locally with the bucket's credentials: nothing is sent. A host's agent downloads a promotion's
    files with it and needs no S3 credentials of its own. Temporary credentials (an instance role) end
    the URL's life when they expire, whatever ``expires`` says.
    """
    params: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version_id:
        params["VersionId"] = version_id
    seconds = max(1, min(int(expires), PRESIGN_MAX_SECONDS))
    try:
        return client.generate_presigned_url("get_object", Params=params, ExpiresIn=seconds)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"presigning GetObject of s3://{bucket}/{key}") from None


# --- offloads: a host's agent uploads with URLs the server signs (``promotion.pushes``) -------------
#
# The host holds no S3 credentials: the server signs each PUT (or each part of a multipart upload it
# starts itself), and completes the upload once the agent says every part is there. Every write is
# conditional on the key being free (If-None-Match: *), so nothing is ever replaced.

MAX_PARTS = 10_000  # S3's own limit on the parts of one upload


def presign_put(
    client: Any,
    bucket: str,
    key: str,
    *,
    storage_class: str = "",
    sha256_hex: str = "",
    expires: int = PRESIGN_SECONDS,
) -> tuple[str, dict[str, str]]:
    """A URL for one PUT of ``key`` that fails if the key exists, and the headers its holder must send.

    The headers are signed into the URL, so the holder cannot drop them: If-None-Match: * (the store
    refuses to replace an object, 412), the storage class, and, when the content's sha256 is known,
    x-amz-checksum-sha256: the store refuses bytes with another sha256 (400 BadDigest) and keeps the
    checksum, which HEAD with ChecksumMode shows.
    """
    params: dict[str, Any] = {"Bucket": bucket, "Key": key, "IfNoneMatch": "*"}
    headers = {"If-None-Match": "*"}
    if storage_class:
        params["StorageClass"] = storage_class
        headers["x-amz-storage-class"] = storage_class
    if sha256_hex:
        value = base64.b64encode(bytes.fromhex(sha256_hex)).decode()
        params.update(ChecksumSHA256=value, ChecksumAlgorithm="SHA256")
        headers.update({"x-amz-checksum-sha256": value, "x-amz-sdk-checksum-algorithm": "SHA256"})
    seconds = max(1, min(int(expires), PRESIGN_MAX_SECONDS))
    try:
        url = client.generate_presigned_url("put_object", Params=params, ExpiresIn=seconds)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"presigning PutObject of s3://{bucket}/{key}") from None
    return url, headers


def multipart_start(client: Any, bucket: str, key: str, *, storage_class: str = "") -> str:
    """Start a multipart upload of ``key``; return its UploadId."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if storage_class:
        kwargs["StorageClass"] = storage_class
    try:
        return str(client.create_multipart_upload(**kwargs)["UploadId"])
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"CreateMultipartUpload of s3://{bucket}/{key}") from None


def multipart_parts(client: Any, bucket: str, key: str, upload_id: str) -> dict[int, tuple[int, str]] | None:
    """The parts an upload holds so far, {number: (size, ETag)}; None when the upload is gone (NoSuchUpload)."""
    parts: dict[int, tuple[int, str]] = {}
    marker = 0
    while True:
        try:
            answer = client.list_parts(Bucket=bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker)
        except (ClientError, BotoCoreError) as exc:
            error = describe(exc, f"ListParts of s3://{bucket}/{key}")
            if error.code in ("NoSuchUpload", "404", "NotFound"):
                return None
            raise error from None
        for part in answer.get("Parts") or []:
            parts[int(part["PartNumber"])] = (int(part.get("Size") or 0), _etag(part.get("ETag")))
        if not answer.get("IsTruncated"):
            return parts
        following = int(answer.get("NextPartNumberMarker") or 0)
        if following <= marker:
            return parts
        marker = following


def presign_part(
    client: Any, bucket: str, key: str, upload_id: str, number: int, *, expires: int = PRESIGN_SECONDS
) -> str:
    """A URL for one UploadPart of an upload the server started."""
    params = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": int(number)}
    seconds = max(1, min(int(expires), PRESIGN_MAX_SECONDS))
    try:
        return client.generate_presigned_url("upload_part", Params=params, ExpiresIn=seconds)
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"presigning UploadPart of s3://{bucket}/{key}") from None


def multipart_complete(client: Any, bucket: str, key: str, upload_id: str, etags: list[str]) -> str:
    """Complete an upload from its parts' ETags (1..N, in order), unless the key exists meanwhile.

    Returns the object's ETag. An existing key raises S3Error with code PreconditionFailed: it is
    never replaced.
    """
    parts = [{"PartNumber": n, "ETag": f'"{_etag(etag)}"'} for n, etag in enumerate(etags, start=1)]
    try:
        answer = client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"CompleteMultipartUpload of s3://{bucket}/{key}") from None
    return _etag(answer.get("ETag"))


def multipart_abort(client: Any, bucket: str, key: str, upload_id: str) -> None:
    """Abort an upload, so that no billed parts stay behind; one already gone is fine."""
    try:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"AbortMultipartUpload of s3://{bucket}/{key}")
        if error.code not in ("NoSuchUpload", "404", "NotFound"):
            raise error from None


@dataclass(slots=True)
class Written:
    """What HEAD says about an object an offload wrote: enough to tell whether it holds the host's bytes."""

    size: int
    etag: str
    sha256: str = ""  # the store's full-object SHA256, hex, when it keeps one
    md5: str = ""  # the ETag, when it is the content's MD5 (single part, not KMS or SSE-C)
    storage_class: str = "STANDARD"


def written(client: Any, bucket: str, key: str) -> Written | None:
    """HEAD ``key`` with ChecksumMode ENABLED: None when there is no such object."""
    try:
        answer = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"HeadObject of s3://{bucket}/{key}")
        if error.code in ("NoSuchKey", "404", "NotFound"):
            return None
        raise error from None
    digests = stored_digests(answer, now=time.time())
    return Written(
        size=int(answer.get("ContentLength") or 0),
        etag=_etag(answer.get("ETag")),
        sha256=str(digests.get("sha256") or ""),
        md5=str(digests.get("md5") or ""),
        storage_class=str(answer.get("StorageClass") or "STANDARD"),
    )


def written_many(client: Any, bucket: str, keys: list[str], *, at_most: int = 0) -> dict[str, Written] | None:
    """What a listing says of ``keys`` (one folder's, say): {key: Written} for those present, no checksum.

    One ListObjectsV2 from just before the first key to the last, instead of a HEAD per key; a key missing
    from the answer is not in the store (as of the listing). The ETag counts as an MD5 only for the caller
    to compare (a listing does not say whether KMS encrypted the object). ``at_most``: give up (None) once
    the listing has gone over this many other objects between the keys (the caller HEADs them instead).
    """
    if not keys:
        return {}
    seen = 0
    ordered = sorted(keys)
    wanted = set(ordered)
    first, last = ordered[0], ordered[-1]
    prefix = first[: next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))]
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if first[:-1] >= prefix:
        kwargs["StartAfter"] = first[:-1]  # sorts just before the first key (and after anything before it)
    found: dict[str, Written] = {}
    while True:
        try:
            answer = client.list_objects_v2(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise describe(exc, f"ListObjectsV2 of s3://{bucket}/{prefix}") from None
        for obj in answer.get("Contents") or []:
            key = str(obj.get("Key"))
            seen += 1
            if at_most and seen > at_most + len(wanted):
                return None
            if key in wanted:
                etag = _etag(obj.get("ETag"))
                found[key] = Written(
                    size=int(obj.get("Size") or 0),
                    etag=etag,
                    md5=etag.lower() if _MD5.match(etag) else "",
                    storage_class=str(obj.get("StorageClass") or "STANDARD"),
                )
            if key >= last:
                return found
        token = answer.get("NextContinuationToken")
        if not answer.get("IsTruncated") or not token:
            return found
        kwargs = {"Bucket": bucket, "Prefix": prefix, "ContinuationToken": token}


def multipart_etag(part_etags: list[str]) -> str:
    """The ETag S3 gives an object uploaded in these parts (each a part's MD5): MD5 of the MD5s, then -N."""
    joined = b"".join(bytes.fromhex(_etag(e)) for e in part_etags)
    return f"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(part_etags)}"


# --- deletions: the frozen items of a deletion job (``actions.execution``) -------------------------

DELETE_BATCH = 1000  # DeleteObjects' own maximum
TRASH_PREFIX = ".ckptfleet-trash/"  # soft-deleted copies at a bucket's root (``actions.trash``); scans skip it


@dataclass(slots=True)
class DeleteOutcome:
    """What the store said about one object of a DeleteObjects request.

    ``deleted`` is True only when the store confirmed the deletion; otherwise ``code`` and
    ``message`` carry its per-key error (AccessDenied: Object Lock or a policy; PreconditionFailed:
    the ETag no longer matches). Both empty: the answer did not mention the object at all.
    """

    key: str
    version_id: str
    deleted: bool = False
    code: str = ""
    message: str = ""
    marker_version_id: str = ""  # asked without a version, the store only added this delete marker


def delete_objects(client: Any, bucket: str, objects: list[tuple[str, str, str]]) -> list[DeleteOutcome]:
    """Delete exact object versions: ``(key, version_id, etag)`` each, at most ``DELETE_BATCH`` in one request.

    With a version id that version alone goes (never a delete marker in its place); without one the
    ETag makes the delete conditional (S3 refuses it with PreconditionFailed when the object was
    rewritten; moto and several S3-compatible stores ignore the condition, so the executor HEADs
    first). An object asked for without a version that the store answers with a delete marker was
    not deleted: its outcome carries the marker's version id instead. Quiet=False, so every key is
    answered for. Returns one outcome per object, in the
    order given; raises S3Error when the request as a whole fails.
    """
    if len(objects) > DELETE_BATCH:
        raise ValueError(f"at most {DELETE_BATCH} objects per DeleteObjects request")
    identifiers = []
    for key, version_id, etag in objects:
        ident: dict[str, Any] = {"Key": key}
        if version_id:
            ident["VersionId"] = version_id
        elif etag:
            ident["ETag"] = f'"{_etag(etag)}"'
        identifiers.append(ident)
    what = f"DeleteObjects of {len(objects)} objects in s3://{bucket}"
    try:
        answer = client.delete_objects(Bucket=bucket, Delete={"Objects": identifiers, "Quiet": False})
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None
    deleted: dict[tuple[str, str], str] = {}
    for item in answer.get("Deleted", ()):
        # Asked without a version, a versioned bucket "deletes" by adding a delete marker: the data stays.
        marker = str(item.get("DeleteMarkerVersionId") or "") if item.get("DeleteMarker") else ""
        deleted[(item.get("Key", ""), str(item.get("VersionId") or ""))] = marker
    errors: dict[tuple[str, str], tuple[str, str]] = {}
    for item in answer.get("Errors", ()):
        # Some stores leave the version id out of an error: it then stands for every version of the key asked for.
        errors[(item.get("Key", ""), str(item.get("VersionId") or ""))] = (
            str(item.get("Code") or "Error"),
            str(item.get("Message") or "").strip(),
        )
    outcomes = []
    for key, version_id, _etag_value in objects:
        error = errors.get((key, version_id)) or errors.get((key, ""))
        if (key, version_id) in deleted and (key, version_id) not in errors:
            marker = "" if version_id else deleted[(key, version_id)]
            outcomes.append(DeleteOutcome(key, version_id, deleted=not marker, marker_version_id=marker))
        elif error is not None:
            outcomes.append(DeleteOutcome(key, version_id, code=error[0], message=error[1]))
        else:
            outcomes.append(DeleteOutcome(key, version_id))
    return outcomes


DELETE_THREADS = 16  # DeleteObject requests in flight, where only the single delete honours If-Match
PROBE_PREFIX = TRASH_PREFIX + "probe/"  # the conditional-delete probe's objects: at the root, where scans never look
_PROBE_WRONG_ETAG = "0" * 32


def probe_conditional_delete(client: Any, bucket: str) -> str | None:
    """Which conditional delete the store honours: "batch" when DeleteObjects refuses a key under a wrong ETag,
    "single" when only DeleteObject refuses a wrong If-Match (moto ignores DeleteObjects' ETag but honours
    If-Match), "none" when the store deleted the object anyway both ways; None when the probe could not tell
    (its object could not be written, or the store refused). Raises S3Error when the store fails for now.

    Writes one small object below ``PROBE_PREFIX`` (a scan never lists it), asks to delete it under an ETag it
    does not have, reads it back, and removes every version of it (and any delete marker an attempt left) by
    exact version id. Without versioning, the executor deletes an object only under the condition the store
    honours, and refuses a hard delete on a store that honours none: a rewrite between the executor's check and
    its delete would otherwise lose the new bytes.
    """
    body = b"ckptfleet: does this store honour an ETag condition on delete?"
    found = "none"
    for way in ("batch", "single"):
        key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body)
        except (ClientError, BotoCoreError) as exc:
            error = describe(exc, f"PutObject of the delete condition probe s3://{bucket}/{key}")
            if error.transient:
                raise error from None  # a store failing for now is asked again, not judged
            log.warning("delete condition probe of %s: cannot write: %s", bucket, error.message)
            return None
        try:
            if way == "batch":
                outcome = delete_objects(client, bucket, [(key, "", _PROBE_WRONG_ETAG)])[0]
            else:
                outcome = delete_if_match(client, bucket, [(key, _PROBE_WRONG_ETAG)], batch=False)[0]
            still = object_state(client, bucket, key)
        except S3Error as exc:
            if exc.transient:
                raise
            log.warning("delete condition probe of %s: %s", bucket, exc.message)
            return None
        finally:
            _probe_cleanup(client, bucket, key)
        if still is not None and not outcome.deleted and not outcome.marker_version_id:
            if outcome.code not in ("PreconditionFailed", "412"):
                continue  # refused for another reason (the parameter unknown?): not a condition honoured
            found = way
            break
    return found


def _probe_cleanup(client: Any, bucket: str, key: str) -> None:
    try:
        left = key_versions(client, bucket, key, markers=True)
        ids = [v.version_id for v in left if v.version_id and v.version_id != "null"]
        if ids:  # a versioned bucket: every version and marker of the probe by its id, nothing hidden
            delete_objects(client, bucket, [(key, i, "") for i in ids][:DELETE_BATCH])
        if len(ids) < len(left):  # no versioning: the one object, version-less
            delete_objects(client, bucket, [(key, "", "")])
    except S3Error as exc:
        log.warning("conditional delete probe of %s: %s stays: %s", bucket, key, exc.message)


def delete_if_match(client: Any, bucket: str, objects: list[tuple[str, str]], *, batch: bool) -> list[DeleteOutcome]:
    """Delete objects of a bucket without versioning only while each still has the ETag given: ``(key, etag)``
    each. ``batch``: one DeleteObjects request (an ETag per key), for stores that honour it; else one DeleteObject
    with If-Match per object (``THREADS`` at a time), which more stores honour (moto among them). An object whose
    ETag differs is answered PreconditionFailed and stays. One outcome per object, in order; raises S3Error
    when a request fails as a whole in a way worth retrying."""
    if batch:
        return delete_objects(client, bucket, [(key, "", etag) for key, etag in objects])

    def one(entry: tuple[str, str]) -> DeleteOutcome:
        key, etag = entry
        try:
            client.delete_object(Bucket=bucket, Key=key, IfMatch=f'"{_etag(etag)}"')
        except (ClientError, BotoCoreError) as exc:
            error = describe(exc, f"DeleteObject of s3://{bucket}/{key}")
            if error.transient or not error.code:
                # For now only (throttled, 5xx, the network): unconfirmed, and asked again by the executor.
                return DeleteOutcome(key, "", code="SlowDown", message=error.message)
            return DeleteOutcome(key, "", code=error.code, message=error.message)
        return DeleteOutcome(key, "", deleted=True)

    if not objects:
        return []
    with ThreadPoolExecutor(max_workers=min(DELETE_THREADS, len(objects))) as pool:
        return list(pool.map(one, objects))


def delete_exact(
    client: Any, bucket: str, objects: list[tuple[str, str, str]], *, condition: str
) -> list[DeleteOutcome]:
    """Delete ``(key, version_id, etag)`` each: by its exact version, or (no version: a bucket without versioning)
    only while its ETag is the one given, in the way the store honours that (``condition``, a ``DeleteCondition``:
    "batch" DeleteObjects, "single" DeleteObject If-Match). One outcome per object, in order.

    With ``condition`` "none" or unknown a version-less object is sent to DeleteObjects with its ETag all the same,
    which such a store ignores: only a soft delete, which compared the object again after its trash copy, sends
    one (the executor refuses a hard delete there)."""
    honoured = condition in (DeleteCondition.BATCH, DeleteCondition.SINGLE)
    outcomes: dict[int, DeleteOutcome] = {}
    exact = [n for n, (_k, version_id, _e) in enumerate(objects) if version_id or not honoured]
    conditional = [n for n, (_k, version_id, _e) in enumerate(objects) if not version_id and honoured]
    for start in range(0, len(exact), DELETE_BATCH):
        chunk = exact[start : start + DELETE_BATCH]
        outcomes.update(zip(chunk, delete_objects(client, bucket, [objects[n] for n in chunk]), strict=True))
    for start in range(0, len(conditional), DELETE_BATCH):
        chunk = conditional[start : start + DELETE_BATCH]
        answers = delete_if_match(
            client, bucket, [(objects[n][0], objects[n][2]) for n in chunk], batch=condition == DeleteCondition.BATCH
        )
        outcomes.update(zip(chunk, answers, strict=True))
    return [outcomes[n] for n in range(len(objects))]


def abort_upload(client: Any, bucket: str, key: str, upload_id: str) -> DeleteOutcome:
    """AbortMultipartUpload of exactly this key and upload id: its parts are freed. The outcome says deleted when
    the store confirmed it, else the store's code (NoSuchUpload: completed or aborted already). Raises S3Error
    when the request failed as a whole in a way worth retrying (throttling, 5xx, the network)."""
    try:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except (ClientError, BotoCoreError) as exc:
        error = describe(exc, f"AbortMultipartUpload of s3://{bucket}/{key}")
        if error.transient or not error.code:
            raise error from None
        return DeleteOutcome(key, "", code=error.code, message=error.message)
    return DeleteOutcome(key, "", deleted=True)


def is_transient_code(code: str) -> bool:
    """A per-key error that says "try again later" rather than "never"."""
    return code in _TRANSIENT_CODES or code in ("500", "503")


# --- audit anchors: write-once objects under Object Lock COMPLIANCE retention ------------------------
# Used by fleet.audit_anchors, the S3 store of the audit chain's anchors (audit.anchors).


def put_compliance_locked(client: Any, bucket: str, key: str, body: bytes, *, retain_until: datetime) -> str:
    """Write a new object version that nobody, the account's root included, can delete or overwrite before
    ``retain_until`` (Object Lock COMPLIANCE mode). Returns its version id; raises S3Error when the store refuses
    (a bucket without Object Lock does)."""
    what = f"PutObject (COMPLIANCE until {retain_until:%Y-%m-%d}) of s3://{bucket}/{key}"
    try:
        answer = client.put_object(
            Bucket=bucket,
            Key=key,
            Body=body,
            ContentType="application/json",
            # Object Lock puts must carry a checksum (S3 refuses them otherwise); this client sends one only when asked.
            ChecksumAlgorithm="SHA256",
            ObjectLockMode="COMPLIANCE",
            ObjectLockRetainUntilDate=retain_until,
        )
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None
    version_id = str(answer.get("VersionId") or "")
    if not version_id:
        raise S3Error(f"{what}: the store kept no version, so it did not lock it", code="ObjectLockMissing")
    return version_id


def object_versions(client: Any, bucket: str, prefix: str) -> Iterator[tuple[str, str]]:
    """(key, version id) of every version below ``prefix``, current or not, delete markers left out."""
    what = f"ListObjectVersions of s3://{bucket}/{prefix}"
    try:
        for answer in client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": PAGE_SIZE}
        ):
            for item in answer.get("Versions", ()):
                yield item["Key"], str(item.get("VersionId") or "")
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, what) from None


def get_version_small(client: Any, bucket: str, key: str, version_id: str, *, limit: int) -> bytes:
    """The content of one small object version, at most ``limit`` bytes. Raises S3Error."""
    try:
        answer = client.get_object(Bucket=bucket, Key=key, VersionId=version_id)
        body = answer["Body"]
        try:
            return body.read(limit + 1)[:limit]
        finally:
            body.close()
    except (ClientError, BotoCoreError) as exc:
        raise describe(exc, f"GetObject of s3://{bucket}/{key} version {version_id}") from None
