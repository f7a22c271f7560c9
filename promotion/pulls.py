"""The agent side of ``agent_pull`` promotions: what a host's agent is asked to fetch, and what it did.

A promotion to a host location is recorded as ``awaiting_agent`` with its frozen files (``promote``).
The host's agent asks for its pending files (``pending``): each comes with a presigned GET URL of
the exact source object (its version, when the catalog knows it), the size and ETag frozen at the
request, the sha256 when the catalog knows it, and the target path below the location's root. The
agent downloads each file into a temporary name next to its target, checks it, never replaces an
existing file, and reports (``report``): ``pulled``, ``skipped`` (it refused: another file is at
the target, or the path would leave the root) or ``failed``. Progress is written to the job as the
reports arrive. Once no file is left pending the job ends, reported by the host: completed with one
``promotion.complete`` event, or failed with the reason and one ``promotion.fail`` event.

A cancelled job's files are no longer handed out, and what an agent reports for them is ignored.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from audit.actor import Actor
from ckptfleet.errors import DomainError, PermissionRefused
from fleet import s3
from fleet.agent import SHA256_HEX
from fleet.models import Bucket, Host
from fleet.services import host_root_or_refuse
from promotion import runner
from promotion.choices import ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.services import HOST_KINDS

BATCH = 1000  # items per report at most
PENDING_LIMIT = 100  # items per answer: their URLs start to age as soon as they are signed
RESULTS = ("pulled", "skipped", "failed")
DETAIL_MAX = 500


def presign_seconds() -> int:
    """How long a pull's URL stays valid (``CKPTFLEET_PROMOTION_PRESIGN_SECONDS``, default an hour)."""
    value = int(settings.PROMOTION_PRESIGN_SECONDS)
    return max(60, min(value, s3.PRESIGN_MAX_SECONDS))


def _host_actor(host: Host) -> Actor:
    return Actor.agent(host.name)


def _pending_items(host: Host, root: str):
    items = PromotionItem.objects.filter(
        state=ItemState.READY,
        job__state=JobState.AWAITING_AGENT,
        job__method=Method.AGENT_PULL,
        job__target_location__host=host,
        job__target_location__kind__in=HOST_KINDS,
    )
    if root:
        host_root_or_refuse(host, root)
        items = items.filter(job__target_location__root_path=root)
    return items


def pending(*, host: Host, root: str = "", limit: int = PENDING_LIMIT) -> dict:
    """The files ``host``'s agent should pull now (below ``root``, if given), each with a fresh presigned URL.

    Only files of this host's own locations, of jobs still awaiting the agent. A job whose source
    bucket cannot be signed for (its credentials reference is broken, say) is left out and named in
    ``unavailable``, so one bad job does not stop the others. The jobs handed out are marked as heard
    from (``heartbeat_at``).
    """
    rows = list(
        _pending_items(host, root)
        .order_by("job_id", "pk")
        .values(
            "pk",
            "job_id",
            "path",
            "source_key",
            "target_key",
            "size",
            "etag",
            "version_id",
            "job__target_location__root_path",
            "job__source_copy__location_id",
            "shard_file__checksum",
            "shard_file__checksum_algo",
        )[: max(1, min(limit, PENDING_LIMIT))]
    )
    seconds = presign_seconds()
    signers: dict[int, tuple[Bucket, object] | str] = {}
    items, unavailable = [], {}
    for row in rows:
        location_id = row["job__source_copy__location_id"]
        if location_id not in signers:
            try:
                bucket = Bucket.objects.get(location_id=location_id)
                signers[location_id] = (bucket, s3.client_for(bucket))
            except Bucket.DoesNotExist:
                signers[location_id] = "the source is no longer a bucket"
            except s3.S3Error as exc:
                signers[location_id] = exc.message
        signer = signers[location_id]
        if isinstance(signer, str):
            unavailable[row["job_id"]] = f"promotion #{row['job_id']}: cannot sign its URLs: {signer}"
            continue
        bucket, client = signer
        try:
            url = s3.presign_get(
                client, bucket.bucket_name, row["source_key"], version_id=row["version_id"], expires=seconds
            )
        except s3.S3Error as exc:
            unavailable[row["job_id"]] = f"promotion #{row['job_id']}: cannot sign its URLs: {exc.message}"
            continue
        known = row["shard_file__checksum_algo"] == "sha256" and SHA256_HEX.match(row["shard_file__checksum"] or "")
        items.append(
            {
                "id": row["pk"],
                "job": row["job_id"],
                "root": row["job__target_location__root_path"],
                "path": row["path"],
                "target": row["target_key"],
                "size": row["size"],
                "etag": row["etag"],
                "sha256": row["shard_file__checksum"] if known else None,
                "source": f"s3://{bucket.bucket_name}/{row['source_key']}",
                "url": url,
                "expires_in": seconds,
            }
        )
    served = {item["job"] for item in items}
    if served:
        PromotionJob.objects.filter(pk__in=served, state=JobState.AWAITING_AGENT).update(heartbeat_at=timezone.now())
    return {"host": host.name, "items": items, "unavailable": list(unavailable.values())}


def _parse(results: object) -> dict[int, dict]:
    """The report, checked whole before anything is recorded; DomainError names the first bad entry."""
    if not isinstance(results, list) or not results:
        raise DomainError(
            'send {"results": [{"id": ..., "result": "pulled|skipped|failed", "detail": "...", '
            '"size": ..., "sha256": "..."}]}',
            code="bad_report",
        )
    if len(results) > BATCH:
        raise DomainError(f"at most {BATCH} results per report", code="bad_report")
    parsed: dict[int, dict] = {}
    for n, entry in enumerate(results, start=1):
        if not isinstance(entry, dict):
            raise DomainError(f"result {n} is not an object", code="bad_report")
        pk, result, detail = entry.get("id"), entry.get("result"), entry.get("detail", "")
        size, sha256 = entry.get("size"), entry.get("sha256")
        if not isinstance(pk, int) or isinstance(pk, bool):
            raise DomainError(f"result {n}: id must be an integer", code="bad_report")
        if result not in RESULTS:
            raise DomainError(f"result {n}: result must be one of {', '.join(RESULTS)}", code="bad_report")
        if not isinstance(detail, str):
            raise DomainError(f"result {n}: detail must be a string", code="bad_report")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise DomainError(f"result {n}: size must be a whole number of bytes", code="bad_report")
        if sha256 is not None and (not isinstance(sha256, str) or not SHA256_HEX.match(sha256)):
            raise DomainError(f"result {n}: sha256 must be 64 lowercase hex digits", code="bad_report")
        if result == "pulled" and size is None:
            raise DomainError(f"result {n}: a pulled file needs the size the agent measured", code="bad_report")
        parsed[pk] = {"result": result, "detail": " ".join(detail.split())[:DETAIL_MAX], "size": size, "sha256": sha256}
    return parsed


def _outcome(item: PromotionItem, known_sha256: str, got: dict) -> tuple[str, str]:
    """The item's state and detail from what the agent said, checked against what was frozen."""
    detail = got["detail"]
    if got["result"] == "skipped":
        return ItemState.BLOCKED, detail or "the agent refused to write it"
    if got["result"] == "failed":
        return ItemState.FAILED, detail or "the agent could not pull it"
    if got["size"] != item.size:
        return ItemState.FAILED, f"the agent measured {got['size']} bytes; the promotion froze {item.size}"
    if known_sha256 and got["sha256"] != known_sha256:
        return ItemState.FAILED, f"the agent measured sha256 {got['sha256'] or 'none'}; the catalog has {known_sha256}"
    if got["sha256"]:
        detail = f"{detail or 'pulled'}; sha256 {got['sha256']}"
    return ItemState.DONE, detail or "pulled"


def report(*, host: Host, results: object) -> dict[str, int]:
    """Record what ``host``'s agent did with its files; end each job whose files are all settled.

    The whole report is refused, and nothing recorded, when an entry is malformed or names a file
    that is not one of this host's pulls. Results for files no longer pending (reported twice, or
    the job was cancelled) are ignored. A pulled file counts as done only when the size (and the
    sha256, when the catalog knows it) the agent measured are the frozen ones.
    """
    parsed = _parse(results)
    rows = PromotionItem.objects.filter(pk__in=list(parsed)).values_list(
        "pk", "job_id", "job__target_location__host_id", "job__method"
    )
    owners = {pk: (job_id, host_id, method) for pk, job_id, host_id, method in rows}
    foreign = [
        pk for pk in parsed if pk not in owners or owners[pk][1] != host.pk or owners[pk][2] != Method.AGENT_PULL
    ]
    if foreign:
        raise PermissionRefused(
            f"items {', '.join(map(str, sorted(foreign)[:10]))} are not files host {host.name} was asked to pull; "
            "nothing was recorded"
        )
    by_job: dict[int, list[int]] = defaultdict(list)
    for pk, (job_id, _host_id, _method) in owners.items():
        by_job[job_id].append(pk)
    actor = _host_actor(host)
    counts = {"recorded": 0, "ignored": 0, "done": 0, "blocked": 0, "failed": 0}
    for job_id, pks in sorted(by_job.items()):
        with transaction.atomic():
            job = PromotionJob.objects.select_for_update(of=("self",)).get(pk=job_id)
            if job.state != JobState.AWAITING_AGENT:
                counts["ignored"] += len(pks)
                continue
            items = list(PromotionItem.objects.filter(pk__in=pks, state=ItemState.READY).select_related("shard_file"))
            counts["ignored"] += len(pks) - len(items)
            now = timezone.now()
            done_bytes = done = blocked = 0
            for item in items:
                sf = item.shard_file
                known = sf.checksum if sf is not None and sf.checksum_algo == "sha256" else ""
                item.state, item.detail = _outcome(item, known, parsed[item.pk])
                item.detail = item.detail[:2000]
                item.done_at = now
                if item.state == ItemState.DONE:
                    done += 1
                    done_bytes += item.size
                    counts["done"] += 1
                elif item.state == ItemState.BLOCKED:
                    blocked += 1
                    counts["blocked"] += 1
                else:
                    counts["failed"] += 1
            if items:
                PromotionItem.objects.bulk_update(items, ["state", "detail", "done_at"], batch_size=500)
                counts["recorded"] += len(items)
            updates = {
                "heartbeat_at": now,
                "items_done": F("items_done") + done,
                "bytes_done": F("bytes_done") + done_bytes,
                "items_blocked": F("items_blocked") + blocked,
            }
            if job.started_at is None:
                updates["started_at"] = now
            PromotionJob.objects.filter(pk=job.pk).update(**updates)
            if not job.items.filter(state=ItemState.READY).exists():
                runner.finish(job.pk, frm=JobState.AWAITING_AGENT, actor=actor)
    return counts
