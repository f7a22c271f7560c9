"""The agent side of ``agent_push`` jobs (offloads): what a host's agent is asked to upload, and what it did.

An offload of a host's copy to a bucket is recorded as ``awaiting_agent`` with its frozen files
(``promotion.moves.request_move``): each item's ``source_key`` is the file's absolute path on the host,
``target_key`` the full key in the target bucket. The host holds no S3 credentials. It asks for its
pending files (``pending``) and gets, per file, a URL the server signed with the bucket's credentials:

- up to ``OFFLOAD_MULTIPART_THRESHOLD`` bytes, one PUT whose signed headers make the store refuse to
  replace an existing object (If-None-Match: *) and, when the catalog knows the file's sha256, refuse
  other bytes (x-amz-checksum-sha256, kept by the store for later verification);
- above it, a multipart upload the server starts (its UploadId is kept on the item), with one URL
  per part. A part the store holds already (ListParts) comes with its ETag, and the agent does not
  send it again when its MD5 is that ETag: a killed run resumes without sending a byte twice.

The agent reads each file once, computing its sha256 and MD5 while it uploads, and reports
(``report``): ``uploaded``, ``skipped`` (it refused, or the target exists: ``exists``) or ``failed``.
The server then completes a multipart upload (unless the key exists meanwhile), HEADs the target (or,
for a report's many single-PUT files in one folder, lists the folder once: size and ETag) and counts
the item done only when the store shows the frozen size and every checksum there is to compare
agrees: the catalog's sha256 with the agent's (and with the store's, when it kept one), a single-part
ETag with the agent's MD5, a multipart ETag with the MD5s of the parts the agent sent. An object that
was at the target before is never replaced: identical, the item is done; anything else, blocked.

When no item is pending any more the job is handed to ``promotion.moves.copied``: a job with a failed
or blocked item fails there (the source is kept); otherwise every new object is verified and only then
is the source freed. A file with no sha256 on record gets the one the agent measured while reading it,
so that the verification has the source's own checksum to compare the new object with.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ckptfleet.celery import task
from ckptfleet.errors import DomainError, PermissionRefused
from fleet import s3
from fleet.agent import SHA256_HEX
from fleet.models import Bucket, Host
from fleet.services import host_root_or_refuse
from promotion.choices import ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.pulls import presign_seconds
from promotion.services import HOST_KINDS

BATCH = 1000  # results per report at most
PENDING_LIMIT = 100  # files per answer: their URLs start to age as soon as they are signed
RESULTS = ("uploaded", "skipped", "failed")
DETAIL_MAX = 500
WAITING = (ItemState.PENDING, ItemState.READY)  # an offload's file not yet settled
STORE_THREADS = 16  # HEADs and completions of one report run side by side
CLIENT_SECONDS = 300  # a bucket's client is reused this long (credentials may rotate)
MD5_HEX_LEN = 32
LIST_AT_LEAST = 8  # a report's files in one folder from this many on: one listing instead of a HEAD each
LIST_OTHERS = 2000  # other objects a listing may step over before a HEAD each is cheaper


def threshold() -> int:
    return settings.OFFLOAD_MULTIPART_THRESHOLD


def part_size_for(size: int) -> int:
    """The part size of a file: ``OFFLOAD_PART_SIZE``, doubled until the file fits in S3's 10,000 parts."""
    part = settings.OFFLOAD_PART_SIZE
    while -(-size // part) > s3.MAX_PARTS:
        part *= 2
    return part


_clients: dict[tuple, tuple[float, Any]] = {}
_clients_lock = threading.Lock()


def _client(bucket: Bucket) -> Any:
    """The bucket's client, made once per ``CLIENT_SECONDS``: each report would otherwise build a session."""
    key = (bucket.pk, bucket.endpoint_url, bucket.region_name, bucket.addressing_style, bucket.credentials)
    now = time.monotonic()
    with _clients_lock:
        found = _clients.get(key)
        if found is not None and now - found[0] < CLIENT_SECONDS:
            return found[1]
    client = s3.client_for(bucket)
    with _clients_lock:
        _clients[key] = (now, client)
    return client


def _known_sha256(item: PromotionItem) -> str:
    """The sha256 recorded for the file before the offload (the item's, else its catalog row's), or ""."""
    own = item.sha256 or ""
    if SHA256_HEX.match(own):
        return own
    sf = item.shard_file
    if sf is not None and sf.checksum_algo == "sha256" and SHA256_HEX.match(sf.checksum or ""):
        return sf.checksum
    return ""


def _pending_items(host: Host, root: str):
    items = PromotionItem.objects.filter(
        state__in=WAITING,
        job__state=JobState.AWAITING_AGENT,
        job__method=Method.AGENT_PUSH,
        job__source_copy__location__host=host,
        job__source_copy__location__kind__in=HOST_KINDS,
    )
    if root:
        host_root_or_refuse(host, root)
        items = items.filter(job__source_copy__location__root_path=root)
    return items


def _signer(location_id: int) -> tuple[Bucket, Any] | str:
    try:
        bucket = Bucket.objects.select_related("location").get(location_id=location_id)
        return bucket, _client(bucket)
    except Bucket.DoesNotExist:
        return "the target is not a bucket"
    except s3.S3Error as exc:
        return exc.message


def _parts(item: PromotionItem, bucket: Bucket, client: Any, seconds: int) -> dict[str, Any]:
    """The multipart upload of one file: started on first demand, its parts listed and signed."""
    have: dict[int, tuple[int, str]] | None = None
    if item.upload_id:
        have = s3.multipart_parts(client, bucket.bucket_name, item.target_key, item.upload_id)
        if have is None:  # aborted or completed since: start again (a completed one ends in "exists")
            PromotionItem.objects.filter(pk=item.pk, upload_id=item.upload_id).update(upload_id="", part_size=0)
            item.upload_id = ""
    if not item.upload_id:
        part = part_size_for(item.size)
        upload_id = s3.multipart_start(
            client, bucket.bucket_name, item.target_key, storage_class=item.job.target_storage_class
        )
        won = PromotionItem.objects.filter(pk=item.pk, upload_id="").update(upload_id=upload_id, part_size=part)
        if not won:  # another run of the agent started one meanwhile: use that one
            s3.multipart_abort(client, bucket.bucket_name, item.target_key, upload_id)
            item.refresh_from_db(fields=["upload_id", "part_size"])
            have = s3.multipart_parts(client, bucket.bucket_name, item.target_key, item.upload_id) or {}
        else:
            item.upload_id, item.part_size, have = upload_id, part, {}
    part = item.part_size or part_size_for(item.size)
    parts = []
    for number, offset in enumerate(range(0, item.size, part), start=1):
        size = min(part, item.size - offset)
        entry: dict[str, Any] = {
            "n": number,
            "offset": offset,
            "size": size,
            "url": s3.presign_part(
                client, bucket.bucket_name, item.target_key, item.upload_id, number, expires=seconds
            ),
        }
        held = (have or {}).get(number)
        if held is not None and held[0] == size:
            entry["etag"] = held[1]
        parts.append(entry)
    return {"part_size": part, "parts": parts}


def _entry(item: PromotionItem, bucket: Bucket, seconds: int) -> dict[str, Any]:
    job = item.job
    known = _known_sha256(item)
    multipart = bool(item.upload_id) or item.size > threshold()
    return {
        "id": item.pk,
        "job": job.pk,
        "root": job.source_copy.location.root_path,
        "path": item.path,
        "source": item.source_key,
        "target": f"s3://{bucket.bucket_name}/{item.target_key}",
        "size": item.size,
        "sha256": known or None,
        "method": "multipart" if multipart else "put",
        "expires_in": seconds,
    }


def _sign_put(entry: dict[str, Any], item: PromotionItem, bucket: Bucket, client: Any, sha256: str, seconds: int):
    url, headers = s3.presign_put(
        client,
        bucket.bucket_name,
        item.target_key,
        storage_class=item.job.target_storage_class,
        sha256_hex=sha256,
        expires=seconds,
    )
    entry.update(url=url, headers=headers)


def pending(
    *,
    host: Host,
    root: str = "",
    after: int = 0,
    limit: int = PENDING_LIMIT,
    sign: bool = True,
    defer_unknown: bool = False,
) -> dict:
    """The files ``host``'s agent should upload now (below ``root``, if given), each with fresh signed URLs.

    Only files of this host's own locations, of offloads still awaiting the agent, by id from ``after``
    on (an agent pages through them while its threads upload the previous page). ``sign=False``
    (the agent's dry run) lists them without signing anything or starting any upload. A job whose
    target bucket cannot be signed for is left out and named in ``unavailable``. ``defer_unknown``:
    a single-PUT file with no sha256 on record comes unsigned (``"sign": "sha256"``): the agent measures
    its sha256 and has the URL signed with it (``sign``), so that the store checks and keeps it.
    """
    rows = list(
        _pending_items(host, root)
        .filter(pk__gt=max(0, after))
        .select_related("job__source_copy__location", "job__target_location", "shard_file")
        .order_by("pk")[: max(1, min(limit, PENDING_LIMIT))]
    )
    seconds = presign_seconds()
    signers: dict[int, tuple[Bucket, Any] | str] = {}
    items, unavailable = [], {}
    for item in rows:
        job = item.job
        location_id = job.target_location_id
        if location_id not in signers:
            signers[location_id] = _signer(location_id)
        signer = signers[location_id]
        if isinstance(signer, str):
            unavailable[job.pk] = f"offload #{job.pk}: cannot sign its URLs: {signer}"
            continue
        bucket, client = signer
        entry = _entry(item, bucket, seconds)
        if sign:
            try:
                if entry["method"] == "multipart":
                    entry.update(_parts(item, bucket, client, seconds))
                elif defer_unknown and not entry["sha256"]:
                    entry["sign"] = "sha256"
                else:
                    _sign_put(entry, item, bucket, client, entry["sha256"] or "", seconds)
            except s3.S3Error as exc:
                unavailable[job.pk] = f"offload #{job.pk}: cannot prepare its uploads: {exc.message}"
                continue
        items.append(entry)
    served = {item["job"] for item in items}
    if served and sign:
        PromotionJob.objects.filter(pk__in=served, state=JobState.AWAITING_AGENT).update(heartbeat_at=timezone.now())
    return {"host": host.name, "items": items, "unavailable": list(unavailable.values())}


def sign(*, host: Host, claims: object) -> dict:
    """Presigned PUTs for files the agent has measured: ``[{"id": 1, "sha256": "<hex>"}, ...]``, at most a page.

    Each URL signs x-amz-checksum-sha256 with the sha256 on record, else the one the agent claims: the store
    then refuses other bytes (400 BadDigest) and keeps the checksum, so the verification compares the
    store's checksum instead of reading the object back. The claim is only the agent's word until the
    store agrees: what the report records is what the agent measured reading the file (as before), and a
    file whose record says otherwise is judged against the record. Items that are not this host's pending
    single-PUT files are left out (the whole request is refused when one names another host's file).
    """
    if not isinstance(claims, list) or not claims or len(claims) > PENDING_LIMIT:
        raise DomainError(
            f'send {{"sign": [{{"id": ..., "sha256": "<64 hex digits>"}}]}}, 1 to {PENDING_LIMIT} files',
            code="bad_sign",
        )
    wanted: dict[int, str] = {}
    for n, claim in enumerate(claims, start=1):
        pk = claim.get("id") if isinstance(claim, dict) else None
        sha256 = claim.get("sha256") if isinstance(claim, dict) else None
        if not isinstance(pk, int) or isinstance(pk, bool) or not _hex(sha256, 64):
            raise DomainError(f"file {n}: needs an integer id and a sha256 of 64 lowercase hex digits", code="bad_sign")
        wanted[pk] = str(sha256)
    owners = dict(
        PromotionItem.objects.filter(pk__in=list(wanted)).values_list("pk", "job__source_copy__location__host_id")
    )
    foreign = sorted(pk for pk in wanted if owners.get(pk) != host.pk)
    if foreign:
        raise PermissionRefused(
            f"items {', '.join(map(str, foreign[:10]))} are not files host {host.name} was asked to upload; "
            "nothing was signed"
        )
    rows = (
        _pending_items(host, "")
        .filter(pk__in=list(wanted))
        .select_related("job__source_copy__location", "job__target_location", "shard_file")
        .order_by("pk")
    )
    seconds = presign_seconds()
    signers: dict[int, tuple[Bucket, Any] | str] = {}
    items, unavailable = [], {}
    for item in rows:
        job = item.job
        if job.target_location_id not in signers:
            signers[job.target_location_id] = _signer(job.target_location_id)
        signer = signers[job.target_location_id]
        if isinstance(signer, str):
            unavailable[job.pk] = f"offload #{job.pk}: cannot sign its URLs: {signer}"
            continue
        bucket, client = signer
        entry = _entry(item, bucket, seconds)
        if entry["method"] != "put":
            continue  # a multipart upload's parts come with the pending list
        try:
            _sign_put(entry, item, bucket, client, entry["sha256"] or wanted[item.pk], seconds)
        except s3.S3Error as exc:
            unavailable[job.pk] = f"offload #{job.pk}: cannot prepare its uploads: {exc.message}"
            continue
        items.append(entry)
    if items:
        served = {item["job"] for item in items}
        PromotionJob.objects.filter(pk__in=served, state=JobState.AWAITING_AGENT).update(heartbeat_at=timezone.now())
    return {"host": host.name, "items": items, "unavailable": list(unavailable.values())}


# --- reports ---------------------------------------------------------------------------------------


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _hex(value: object, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and all(c in "0123456789abcdef" for c in value)


def _parse(results: object) -> dict[int, dict]:
    """The report, checked whole before anything is recorded; DomainError names the first bad entry."""
    if not isinstance(results, list) or not results:
        raise DomainError(
            'send {"results": [{"id": ..., "result": "uploaded|skipped|failed", "detail": "...", "size": ..., '
            '"sha256": "...", "md5": "...", "parts": [{"n": 1, "etag": "..."}]}]}',
            code="bad_report",
        )
    if len(results) > BATCH:
        raise DomainError(f"at most {BATCH} results per report", code="bad_report")
    parsed: dict[int, dict] = {}
    for n, entry in enumerate(results, start=1):
        if not isinstance(entry, dict):
            raise DomainError(f"result {n} is not an object", code="bad_report")
        pk, result, detail = entry.get("id"), entry.get("result"), entry.get("detail", "")
        size, sha256, md5 = entry.get("size"), entry.get("sha256"), entry.get("md5")
        parts, exists = entry.get("parts"), entry.get("exists", False)
        if not isinstance(pk, int) or isinstance(pk, bool):
            raise DomainError(f"result {n}: id must be an integer", code="bad_report")
        if result not in RESULTS:
            raise DomainError(f"result {n}: result must be one of {', '.join(RESULTS)}", code="bad_report")
        if not isinstance(detail, str):
            raise DomainError(f"result {n}: detail must be a string", code="bad_report")
        if size is not None and not _whole(size):
            raise DomainError(f"result {n}: size must be a whole number of bytes", code="bad_report")
        if sha256 is not None and not _hex(sha256, 64):
            raise DomainError(f"result {n}: sha256 must be 64 lowercase hex digits", code="bad_report")
        if md5 is not None and not _hex(md5, MD5_HEX_LEN):
            raise DomainError(f"result {n}: md5 must be 32 lowercase hex digits", code="bad_report")
        if not isinstance(exists, bool):
            raise DomainError(f"result {n}: exists must be true or false", code="bad_report")
        etags: list[str] | None = None
        if parts is not None:
            if not isinstance(parts, list) or not parts or len(parts) > s3.MAX_PARTS:
                raise DomainError(f"result {n}: parts must be a list of 1 to {s3.MAX_PARTS} parts", code="bad_report")
            numbers, etags = [], []
            for part in parts:
                if (
                    not isinstance(part, dict)
                    or not isinstance(part.get("n"), int)
                    or not _hex(str(part.get("etag", "")).strip('"'), MD5_HEX_LEN)
                ):
                    raise DomainError(
                        f'result {n}: each part is {{"n": <number>, "etag": "<32 hex digits>"}}', code="bad_report"
                    )
                numbers.append(part["n"])
                etags.append(str(part["etag"]).strip('"'))
            if numbers != list(range(1, len(numbers) + 1)):
                raise DomainError(f"result {n}: parts must be numbered 1, 2, ... in order", code="bad_report")
        if result == "uploaded" or exists:
            if size is None or sha256 is None or md5 is None:
                raise DomainError(
                    f"result {n}: an uploaded file needs the size, sha256 and md5 the agent measured",
                    code="bad_report",
                )
        parsed[pk] = {
            "result": result,
            "detail": " ".join(detail.split())[:DETAIL_MAX],
            "size": size,
            "sha256": sha256,
            "md5": md5,
            "etags": etags,
            "exists": exists,
        }
    return parsed


@dataclass(slots=True)
class _Outcome:
    state: str
    detail: str


def _mib(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n} bytes"


def _abort(client: Any, bucket: Bucket, item: PromotionItem) -> None:
    if item.upload_id:
        try:
            s3.multipart_abort(client, bucket.bucket_name, item.target_key, item.upload_id)
        except s3.S3Error:
            pass  # an upload left behind is found as an incomplete multipart upload, and priced


def _judge(
    item: PromotionItem, got: dict, bucket: Bucket, client: Any, listed: s3.Written | None = None
) -> _Outcome | None:
    """What became of one reported file, from the agent's word checked against the store's; None: still pending.

    ``listed``: what a listing of the file's folder showed of the target; when it shows the frozen size and
    the MD5 the agent read as the ETag, it stands for the HEAD (the store's own checksum agrees); otherwise
    the target is HEADed. Network calls only: no database access (runs on a worker thread of the report).
    """
    known = _known_sha256(item)
    where = f"s3://{bucket.bucket_name}/{item.target_key}"
    if got["result"] == "failed":
        _abort(client, bucket, item)
        return _Outcome(ItemState.FAILED, got["detail"] or "the agent could not upload it")
    if got["result"] == "skipped" and not got["exists"]:
        _abort(client, bucket, item)
        return _Outcome(ItemState.BLOCKED, got["detail"] or "the agent refused to read it")
    if got["size"] != item.size:
        _abort(client, bucket, item)
        return _Outcome(ItemState.FAILED, f"the agent read {got['size']} bytes; the offload froze {item.size}")
    if known and got["sha256"] != known:
        _abort(client, bucket, item)
        return _Outcome(
            ItemState.FAILED,
            f"sha256 mismatch: the agent measured {got['sha256']} reading {item.source_key}; the catalog recorded "
            f"{known} (the host's file is not the one recorded)",
        )
    expected_etag = ""
    exists = got["exists"]
    try:
        if item.upload_id and got["result"] == "uploaded":
            etags = got["etags"]
            if not etags:
                return _Outcome(ItemState.FAILED, "the agent reported a multipart upload without its parts")
            part = item.part_size or part_size_for(item.size)
            count = -(-item.size // part)
            if len(etags) != count:
                return _Outcome(ItemState.FAILED, f"the agent reported {len(etags)} parts; the file has {count}")
            expected_etag = s3.multipart_etag(etags)
            have = s3.multipart_parts(client, bucket.bucket_name, item.target_key, item.upload_id)
            if have is None:
                exists = True  # completed by an earlier report whose answer was lost, or aborted: the HEAD tells
            else:
                for number, etag in enumerate(etags, start=1):
                    size = min(part, item.size - (number - 1) * part)
                    if have.get(number) != (size, etag):
                        held = have.get(number)
                        return _Outcome(
                            ItemState.FAILED,
                            f"part {number}: the store holds {held or 'nothing'}, the agent reported ({size}, {etag})",
                        )
                try:
                    s3.multipart_complete(client, bucket.bucket_name, item.target_key, item.upload_id, etags)
                except s3.S3Error as exc:
                    if exc.code not in ("PreconditionFailed", "412"):
                        raise
                    exists = True
                    _abort(client, bucket, item)
        elif got["etags"]:
            expected_etag = s3.multipart_etag(got["etags"])
        if listed is not None and listed.size == item.size and listed.md5 and listed.md5 == got["md5"]:
            there = listed
        else:
            there = s3.written(client, bucket.bucket_name, item.target_key)
    except s3.S3Error as exc:
        if exc.transient:
            return None  # the agent reports it again next run
        return _Outcome(ItemState.FAILED, exc.message)
    if there is None:
        if exists:
            return None  # the object the agent found is gone again: upload it next run
        return _Outcome(ItemState.FAILED, f"after the upload the store has no object at {where}")
    checks, differs = ["size"], []
    if there.size != item.size:
        differs.append(f"{there.size} bytes, not {item.size}")
    if there.sha256:
        if known and there.sha256 != known:
            differs.append(f"the store's sha256 {there.sha256}, not the recorded {known}")
        elif there.sha256 != got["sha256"]:
            differs.append(f"the store's sha256 {there.sha256}, the agent read {got['sha256']}")
        else:
            checks.append("sha256 (store)")
    if there.md5:
        if there.md5 != got["md5"]:
            differs.append(f"ETag {there.md5}, the MD5 the agent read is {got['md5']}")
        else:
            checks.append("MD5 = ETag")
    elif expected_etag:
        if there.etag != expected_etag:
            differs.append(f"ETag {there.etag}, the parts the agent sent make {expected_etag}")
        else:
            checks.append("multipart ETag")
    shown_by_store = len(checks) > 1  # the store's own checksum agrees with what the agent read
    if known:
        checks.append("sha256 (catalog)")
    asked = item.job.target_storage_class
    if exists and not differs and asked and there.storage_class.upper() != asked.upper():
        differs.append(f"the same bytes, but in {there.storage_class}, not {asked}")
    if exists:
        if differs or not shown_by_store:
            why = "; ".join(differs) or "no checksum to show it identical"
            return _Outcome(ItemState.BLOCKED, f"another object exists at {where} ({why}): never overwritten")
        return _Outcome(ItemState.DONE, f"already at the target, identical ({', '.join(checks)} checked)")
    if differs:
        return _Outcome(ItemState.FAILED, f"the object at {where} is not what the agent read: {'; '.join(differs)}")
    return _Outcome(ItemState.DONE, f"uploaded {_mib(item.size)}; {', '.join(checks)} checked; sha256 {got['sha256']}")


def report(*, host: Host, results: object) -> dict[str, int]:
    """Record what ``host``'s agent did with its files; end each job whose files are all settled.

    The whole report is refused, and nothing recorded, when an entry is malformed or names a file
    that is not one of this host's offloads. Results for files no longer pending (reported twice, or
    the job was cancelled) are ignored. The store is asked about each uploaded file (the multipart
    upload completed, the target HEADed) before anything is written, outside any transaction.
    """
    parsed = _parse(results)
    rows = PromotionItem.objects.filter(pk__in=list(parsed)).values_list(
        "pk", "job_id", "job__source_copy__location__host_id", "job__method"
    )
    owners = {pk: (job_id, host_id, method) for pk, job_id, host_id, method in rows}
    foreign = [
        pk for pk in parsed if pk not in owners or owners[pk][1] != host.pk or owners[pk][2] != Method.AGENT_PUSH
    ]
    if foreign:
        raise PermissionRefused(
            f"items {', '.join(map(str, sorted(foreign)[:10]))} are not files host {host.name} was asked to upload; "
            "nothing was recorded"
        )
    live = list(
        PromotionItem.objects.filter(pk__in=list(parsed), state__in=WAITING, job__state=JobState.AWAITING_AGENT)
        .select_related("job", "shard_file")
        .order_by("pk")
    )
    signers: dict[int, tuple[Bucket, Any] | str] = {}
    for item in live:
        if item.job.target_location_id not in signers:
            signers[item.job.target_location_id] = _signer(item.job.target_location_id)

    folders: dict[tuple[int, str], list[str]] = defaultdict(list)
    for item in live:
        got = parsed[item.pk]
        if got["result"] == "uploaded" and not item.upload_id and not got["etags"] and not got["exists"]:
            folders[(item.job.target_location_id, item.target_key.rpartition("/")[0])].append(item.target_key)
    listings = {where: keys for where, keys in folders.items() if len(keys) >= LIST_AT_LEAST}
    listed: dict[tuple[int, str], s3.Written] = {}

    def listing(where: tuple[int, str]) -> None:
        signer = signers[where[0]]
        if isinstance(signer, str):
            return
        bucket, client = signer
        try:
            found = s3.written_many(client, bucket.bucket_name, listings[where], at_most=LIST_OTHERS)
        except s3.S3Error:
            return  # each file is HEADed instead
        if found is None:
            return  # a crowded folder: each file is HEADed instead
        for key, state in found.items():
            listed[(where[0], key)] = state

    def judge(item: PromotionItem) -> tuple[int, _Outcome | None]:
        signer = signers[item.job.target_location_id]
        if isinstance(signer, str):
            return item.pk, None  # cannot ask the store now: the file stays pending
        seen = listed.get((item.job.target_location_id, item.target_key))
        return item.pk, _judge(item, parsed[item.pk], *signer, listed=seen)

    with ThreadPoolExecutor(max_workers=min(STORE_THREADS, max(1, len(live)))) as pool:
        list(pool.map(listing, listings))
        outcomes = dict(pool.map(judge, live))

    by_job: dict[int, list[int]] = defaultdict(list)
    for pk, (job_id, _host_id, _method) in owners.items():
        by_job[job_id].append(pk)
    counts = {"recorded": 0, "ignored": 0, "pending": 0, "done": 0, "blocked": 0, "failed": 0}
    settled: list[int] = []
    for job_id, pks in sorted(by_job.items()):
        with transaction.atomic():
            job = PromotionJob.objects.select_for_update(of=("self",)).get(pk=job_id)
            if job.state != JobState.AWAITING_AGENT:
                counts["ignored"] += len(pks)
                continue
            items = list(PromotionItem.objects.filter(pk__in=pks, state__in=WAITING))
            counts["ignored"] += len(pks) - len(items)
            now = timezone.now()
            done_bytes = done = blocked = 0
            recorded = []
            for item in items:
                outcome = outcomes.get(item.pk)
                if outcome is None:
                    counts["pending"] += 1
                    continue
                item.state, item.detail, item.done_at = outcome.state, outcome.detail[:2000], now
                if item.state == ItemState.DONE and not item.sha256 and parsed[item.pk]["sha256"]:
                    # Nothing was recorded before: what the agent read at the source is what the new object
                    # is verified against (by the store's checksum or read back), never the store's word alone.
                    item.sha256 = parsed[item.pk]["sha256"]
                recorded.append(item)
                if item.state == ItemState.DONE:
                    done += 1
                    done_bytes += item.size
                    counts["done"] += 1
                elif item.state == ItemState.BLOCKED:
                    blocked += 1
                    counts["blocked"] += 1
                else:
                    counts["failed"] += 1
            if recorded:
                PromotionItem.objects.bulk_update(recorded, ["state", "detail", "done_at", "sha256"], batch_size=500)
                counts["recorded"] += len(recorded)
            updates: dict[str, Any] = {
                "heartbeat_at": now,
                "items_done": F("items_done") + done,
                "bytes_done": F("bytes_done") + done_bytes,
                "items_blocked": F("items_blocked") + blocked,
            }
            if job.started_at is None:
                updates["started_at"] = now
            PromotionJob.objects.filter(pk=job.pk).update(**updates)
            if not job.items.filter(state__in=WAITING).exists():
                settled.append(job.pk)
    for job_id in settled:  # after the commit: the moves talk to the store
        _copied(job_id)
    return counts


def _copied(job_id: int) -> None:
    """No file of the offload is pending any more: ``promotion.moves.copied`` fails the job if one was not
    uploaded (the source is kept), else verifies every new object and only then frees the source. In a
    worker: verifying thousands of objects must not hold the agent's report open."""
    task("promotion.tasks.move_copied").delay(job_id)
