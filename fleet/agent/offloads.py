"""``--offloads``: the files offloads asked this host to upload to a bucket with URLs the server signs, each read
once for its sha256 and MD5 while it is sent, never replacing an object, and reported."""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import errno
import hashlib
import io
import json
import os
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO, cast

from .common import HASH_BLOCK, AgentError, human_bytes, one_line, open_dirs, os_reason, printable, stderr_warn
from .contract import OFFLOADS_PATH, OFFLOADS_SIGN_PATH, SHA256_HEX, SINGLE_PART_ETAG, path_problem
from .store import (
    REPORT_EVERY,
    REPORT_SECONDS,
    URL_MARGIN_SECONDS,
    Failed,
    Later,
    StoreAnswer,
    StoreConnections,
    hash_rest,
    new_md5,
    put_range,
    strip_etag,
    with_retries,
)
from .wire import answer_json, fetch_work, refusal, report_work, send_request

DEFAULT_JOBS = 8  # files uploaded at once by --offloads


def _layout(item: dict[str, Any], size: int) -> list[dict[str, Any]] | None:
    """The parts of a multipart item, checked to cover the file end to end in order; None when they do not."""
    parts = item.get("parts")
    if not isinstance(parts, list) or not parts:
        return None
    offset = 0
    for n, part in enumerate(parts, start=1):
        if not isinstance(part, dict) or part.get("n") != n or part.get("offset") != offset:
            return None
        length, url = part.get("size"), part.get("url")
        if not isinstance(length, int) or length <= 0 or not isinstance(url, str):
            return None
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            return None
        offset += length
    return parts if offset == size else None


def _open_source(root: str, rel: str) -> tuple[BinaryIO | None, str, str]:
    """Open ``root/rel`` for reading without following any symlink: (file, "", "") or (None, result, why)."""
    parts = rel.split("/")
    try:
        fd = open_dirs(root, parts[:-1])
    except FileNotFoundError:
        return None, "failed", "missing: its directory is gone"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None, "skipped", "refused: a directory on its path is a symlink or not a directory"
        return None, "failed", f"cannot open its directory: {os_reason(exc)}"
    try:
        try:
            file_fd = os.open(parts[-1], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
        except FileNotFoundError:
            return None, "failed", "missing: no such file"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None, "skipped", "refused: it is a symlink; never followed"
            return None, "failed", f"cannot open it: {os_reason(exc)}"
    finally:
        os.close(fd)
    return os.fdopen(file_fd, "rb"), "", ""


def push_file(
    root: str,
    item: dict[str, Any],
    *,
    conns: StoreConnections | None = None,
    timeout: float = 60.0,
    retries: int = 3,
    dry_run: bool = False,
    part_pool: concurrent.futures.ThreadPoolExecutor | None = None,
) -> tuple[str, str, dict]:
    """Upload one file the server asked for from ``root`` to its bucket, reading it once.

    ``part_pool``: a multipart upload's parts are sent side by side on its threads (the whole file's
    checksums are computed meanwhile, in one more pass over it); without it, one after the other.

    Returns (result, detail, measured): "uploaded" with measured {"size", "sha256", "md5"} (and the
    "parts" of a multipart upload); "skipped" when the path is not a plain relative path below the
    root, leads through a symlink, or an object is at the target already (measured then says
    "exists", for the server to judge whether it is identical); "failed" when the file is missing,
    changed size, or the store refused the bytes. Each PUT is conditional (If-None-Match: *), so
    nothing is replaced. A part the store holds already is read (for the checksums) but not sent
    again when its MD5 is the part's ETag. Raises Later for trouble that may pass.
    """
    try:
        rel, source, size = item["path"], item["source"], item["size"]
        method = item["method"]
        sha256 = item.get("sha256") or ""
    except (KeyError, TypeError):
        return "skipped", "refused: the server sent an incomplete item", {}
    if not all(isinstance(v, str) for v in (rel, source, sha256)) or not isinstance(size, int) or size < 0:
        return "skipped", "refused: the server sent an incomplete item", {}
    if sha256 and not SHA256_HEX.match(sha256):
        return "skipped", "refused: the server sent a malformed sha256", {}
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root", {}
    if source != root.rstrip("/") + "/" + rel:
        return "skipped", "refused: the source is not the path below this root", {}
    where = item.get("target") or "the bucket"
    parts: list[dict[str, Any]] | None = None
    if method == "multipart" and not dry_run:
        parts = _layout(item, size)
        if parts is None:
            return "skipped", "refused: the server sent parts that do not cover the file", {}
    elif method == "put" and not dry_run:
        url, headers = item.get("url"), item.get("headers") or {}
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            return "skipped", "refused: the upload URL is not http(s)", {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return "skipped", "refused: the server sent malformed headers", {}
    elif method not in ("put", "multipart"):
        return "skipped", f"refused: unknown upload method {printable(str(method))[:40]}", {}
    f, result, why = _open_source(root, rel)
    if f is None:
        return result, why, {}
    with f:
        try:
            st = os.fstat(f.fileno())
        except OSError as exc:
            return "failed", f"cannot stat it: {os_reason(exc)}", {}
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "refused: not a regular file", {}
        if st.st_size != size:
            return "failed", f"changed: its size is {st.st_size} bytes, the offload froze {size}", {}
        if dry_run:
            return "would upload", f"{human_bytes(size)} to {where} ({method})", {}
        conns = conns or StoreConnections(timeout)
        try:
            if parts is None:
                measured = _push_whole(f, item, size, conns, retries)
            elif part_pool is not None and len(parts) > 1:
                measured = _push_parts_side_by_side(f, parts, size, conns, retries, part_pool)
            else:
                measured = _push_parts(f, parts, size, conns, retries)
        except Failed as exc:
            return "failed", str(exc), {}
        except OSError as exc:  # reading the file
            return "failed", f"cannot read it: {os_reason(exc)}", {}
        try:
            after = os.fstat(f.fileno())
        except OSError as exc:
            return "failed", f"cannot stat it: {os_reason(exc)}", {}
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            return "failed", "changed while it was read: not counted as uploaded", measured
    if measured.get("exists"):
        return "skipped", f"an object is at {where} already; never replaced", measured
    checked = "sha256 matches the catalog" if sha256 and measured["sha256"] == sha256 else "sha256 measured"
    how = f"in {len(measured['parts'])} parts" if "parts" in measured else "in one PUT"
    return "uploaded", f"uploaded {human_bytes(size)} {how}; {checked}", measured


def _push_whole(f: BinaryIO, item: dict[str, Any], size: int, conns: StoreConnections, retries: int) -> dict:
    state: dict[str, Any] = {}

    def attempt() -> None:
        try:
            _n, state["etag"], state["keyed"], (state["sha"], state["md5"]) = put_range(
                conns,
                item["url"],
                f,
                offset=0,
                length=size,
                headers=item["headers"] or {},
                hashers=[hashlib.sha256(), new_md5()],
            )
        except StoreAnswer as exc:
            if exc.status != 412:
                raise
            # If-None-Match: an object is at the key already. The server judges it from what the file holds.
            state["sha"], state["md5"] = hashlib.sha256(), new_md5()
            hash_rest(f, 0, [state["sha"], state["md5"]])
            state["exists"] = True

    with_retries(attempt, "the upload", retries)
    measured = {"size": size, "sha256": state["sha"].hexdigest(), "md5": state["md5"].hexdigest()}
    if state.get("exists"):
        return {**measured, "exists": True}
    etag = state["etag"]
    if SINGLE_PART_ETAG.match(etag) and not state["keyed"] and etag != measured["md5"]:
        raise Failed(f"the store's ETag {etag} is not the MD5 {measured['md5']} of what was sent")
    return measured


def _push_parts(f: BinaryIO, parts: list[dict[str, Any]], size: int, conns: StoreConnections, retries: int) -> dict:
    sha, md5 = hashlib.sha256(), new_md5()
    etags: list[dict[str, Any]] = []
    for part in parts:
        n, offset, length = part["n"], part["offset"], part["size"]
        held = strip_etag(part.get("etag"))
        if held:
            whole = (sha.copy(), md5.copy())
            piece = new_md5()
            f.seek(offset)
            left = length
            while left:
                block = f.read(min(HASH_BLOCK, left))
                if not block:
                    raise Failed(f"the file ended inside part {n}: it changed while it was read")
                for h in (sha, md5, piece):
                    h.update(block)
                left -= len(block)
            if piece.hexdigest() == held:
                etags.append({"n": n, "etag": held})
                continue  # the store holds this part already: not sent again
            sha, md5 = whole  # the store's part is other bytes: send this one again
        sha, md5, piece, etag, keyed = _send_part(conns, part["url"], f, n, offset, length, (sha, md5), retries)
        if SINGLE_PART_ETAG.match(etag) and not keyed and etag != piece.hexdigest():
            raise Failed(f"the store's ETag {etag} of part {n} is not the MD5 {piece.hexdigest()} of what was sent")
        etags.append({"n": n, "etag": etag or piece.hexdigest()})
    return {"size": size, "sha256": sha.hexdigest(), "md5": md5.hexdigest(), "parts": etags}


class _PositionalReader:
    """seek/read over a file descriptor with pread: threads reading one file each keep their own position."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0

    def seek(self, offset: int) -> None:
        self.pos = offset

    def read(self, n: int) -> bytes:
        block = os.pread(self.fd, n, self.pos)
        self.pos += len(block)
        return block


def _push_parts_side_by_side(
    f: BinaryIO,
    parts: list[dict[str, Any]],
    size: int,
    conns: StoreConnections,
    retries: int,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> dict:
    """``_push_parts`` with the parts sent on ``pool``'s threads; the file's sha256 and MD5 in a pass meanwhile.

    Each part's MD5 is checked against the ETag the store answers; a part the store holds already (its MD5
    is that ETag) is not sent again. The first failing part (by number) is the one reported; the parts
    sent meanwhile stay with the upload, for the next run to skip.
    """
    fd = f.fileno()

    def one(part: dict[str, Any]) -> str:
        n, offset, length = part["n"], part["offset"], part["size"]
        reader = _PositionalReader(fd)
        held = strip_etag(part.get("etag"))
        if held:
            piece = new_md5()
            reader.seek(offset)
            left = length
            while left:
                block = reader.read(min(HASH_BLOCK, left))
                if not block:
                    raise Failed(f"the file ended inside part {n}: it changed while it was read")
                piece.update(block)
                left -= len(block)
            if piece.hexdigest() == held:
                return held  # the store holds this part already: not sent again
        state: dict[str, Any] = {}

        def attempt() -> None:
            _sent, state["etag"], state["keyed"], state["hashers"] = put_range(
                conns,
                part["url"],
                cast(BinaryIO, reader),
                offset=offset,
                length=length,
                headers={},
                hashers=[new_md5()],
            )

        with_retries(attempt, f"part {n}", retries)
        piece, etag = state["hashers"][0], state["etag"]
        if SINGLE_PART_ETAG.match(etag) and not state["keyed"] and etag != piece.hexdigest():
            raise Failed(f"the store's ETag {etag} of part {n} is not the MD5 {piece.hexdigest()} of what was sent")
        return etag or piece.hexdigest()

    futures = [pool.submit(one, part) for part in parts]
    sha, md5 = hashlib.sha256(), new_md5()
    whole = _PositionalReader(fd)
    read = hash_rest(cast(BinaryIO, whole), 0, [sha, md5])
    concurrent.futures.wait(futures)
    for future in futures:  # the first failure by part number; the others' outcomes are in the store
        future.result()
    if read != size:
        raise Failed(f"the file holds {read} bytes, not {size}: it changed while it was read")
    etags = [{"n": part["n"], "etag": future.result()} for part, future in zip(parts, futures)]
    return {"size": size, "sha256": sha.hexdigest(), "md5": md5.hexdigest(), "parts": etags}


def _send_part(
    conns: StoreConnections,
    url: str,
    f: BinaryIO,
    n: int,
    offset: int,
    length: int,
    whole: tuple[Any, Any],
    retries: int,
) -> tuple[Any, Any, Any, str, bool]:
    """Upload one part, each try from the hash state ``whole`` had before it: (sha256, MD5, part MD5, ETag, keyed)."""
    state: dict[str, Any] = {}

    def attempt() -> None:
        _sent, state["etag"], state["keyed"], state["hashers"] = put_range(
            conns, url, f, offset=offset, length=length, headers={}, hashers=[whole[0], whole[1], new_md5()]
        )

    with_retries(attempt, f"part {n}", retries)
    sha, md5, piece = state["hashers"]
    return sha, md5, piece, state["etag"], state["keyed"]


def fetch_offloads(
    server: str, token: str, root: str, *, after: int = 0, dry_run: bool = False, timeout: float = 60.0
) -> dict[str, Any]:
    """The files this host was asked to upload from ``root``, each with presigned URLs: {"items": [...], ...}."""
    extra = {"after": str(after)} if after else {}
    if dry_run:
        extra["dry_run"] = "1"
    else:
        extra["defer"] = "sha256"  # a file with no sha256 on record: measured first, then signed with it
    return fetch_work(OFFLOADS_PATH, server, token, root, timeout=timeout, extra=extra)


def sign_offloads(server: str, token: str, claims: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    """Have the server sign PUTs with the sha256 this agent measured: the store then checks and keeps it."""
    body = json.dumps({"sign": claims}).encode()
    status, reason, answer = send_request(
        "POST",
        server.rstrip("/") + OFFLOADS_SIGN_PATH,
        token,
        timeout=timeout,
        body=io.BytesIO(body),
        length=len(body),
        headers=[("Content-Type", "application/json")],
    )
    if status != 200:
        raise AgentError(refusal(status, reason, answer), fatal=status in (401, 403))
    doc = answer_json(answer)
    if doc is None or not isinstance(doc.get("items"), list):
        raise AgentError(f"server answered without a list of items: {one_line(answer[:200])}")
    return doc


def measure_file(root: str, item: dict[str, Any]) -> tuple[str, str, str]:
    """The sha256 of a file the server asked to be measured before its PUT is signed: (sha256, "", "").

    ("", result, why) when it cannot be read as asked (reported as such); ("", "", "") when the item
    itself is not acceptable, which ``push_file`` then refuses with its reason. Never follows a symlink.
    """
    rel, source, size = item.get("path"), item.get("source"), item.get("size")
    if not isinstance(rel, str) or not isinstance(source, str) or not isinstance(size, int) or size < 0:
        return "", "", ""
    if path_problem(rel) or source != root.rstrip("/") + "/" + rel:
        return "", "", ""
    f, result, why = _open_source(root, rel)
    if f is None:
        return "", result, why
    with f:
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return "", "skipped", "refused: not a regular file"
            if st.st_size != size:
                return "", "failed", f"changed: its size is {st.st_size} bytes, the offload froze {size}"
            sha = hashlib.sha256()
            if hash_rest(f, 0, [sha]) != size:
                return "", "failed", "changed while it was read: its size moved"
        except OSError as exc:
            return "", "failed", f"cannot read it: {os_reason(exc)}"
    return sha.hexdigest(), "", ""


def report_offloads(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return report_work(OFFLOADS_PATH, server, token, results, timeout=timeout)


def offload_root(args: argparse.Namespace, root: str, server: str, token: str) -> bool:
    """Upload this root's files with ``--jobs`` threads, reporting as they finish. True when none is left over."""
    label = f"{args.host}:{root}"
    counts: collections.Counter[str] = collections.Counter()
    conns = StoreConnections(args.timeout)
    part_pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="part")
    tried: set[int] = set()
    after = 0
    exhausted = False
    results: list[dict[str, Any]] = []
    reported = time.monotonic()

    def one(item: dict[str, Any], fetched: float) -> tuple[dict[str, Any], str, str, dict]:
        if item.get("root") != root:
            return item, "skipped", "refused: the item is not below this root", {}
        lifetime = item.get("expires_in")
        if isinstance(lifetime, (int, float)) and time.monotonic() > fetched + lifetime - min(
            URL_MARGIN_SECONDS, lifetime / 4
        ):
            return item, "later", "its URL expired before the upload could start", {}
        try:
            return (
                item,
                *push_file(root, item, conns=conns, timeout=args.timeout, dry_run=args.dry_run, part_pool=part_pool),
            )
        except Later as exc:
            return item, "later", str(exc), {}

    def settled(item: dict[str, Any], result: str, why: str) -> tuple[dict[str, Any], str, str, dict]:
        return item, result, why, {}

    def _signed(pool: concurrent.futures.ThreadPoolExecutor, deferred: list[dict[str, Any]]) -> set:
        """Measure the files side by side, have their PUTs signed with the sha256s, and start their uploads."""
        futures: set[concurrent.futures.Future] = set()
        claims = []
        for item, (sha256, result, why) in zip(deferred, pool.map(lambda i: measure_file(root, i), deferred)):
            if sha256:
                claims.append({"id": item["id"], "sha256": sha256})
            elif result:
                futures.add(pool.submit(settled, item, result, why))
            else:
                futures.add(pool.submit(one, item, time.monotonic()))  # push_file refuses it, with its reason
        if claims:
            doc = sign_offloads(server, token, claims, timeout=args.timeout)
            fetched = time.monotonic()
            for note in doc.get("unavailable") or []:
                stderr_warn(f"{label}: {one_line(note)}")
            for item in doc["items"]:
                if isinstance(item, dict) and isinstance(item.get("id"), int) and item["id"] in tried:
                    futures.add(pool.submit(one, item, fetched))
        return futures

    def flush(force: bool) -> None:
        nonlocal results, reported
        if results and (force or len(results) >= REPORT_EVERY or time.monotonic() - reported >= REPORT_SECONDS):
            answer = report_offloads(server, token, results, timeout=args.timeout)
            counts["later"] += int(answer.get("pending") or 0)
            counts["done"] += int(answer.get("done") or 0)
            counts["not done"] += int(answer.get("failed") or 0) + int(answer.get("blocked") or 0)
            results, reported = [], time.monotonic()

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            running: set[concurrent.futures.Future] = set()
            while running or not exhausted:
                if not exhausted and len(running) < 2 * args.jobs:
                    doc = fetch_offloads(server, token, root, after=after, dry_run=args.dry_run, timeout=args.timeout)
                    fetched = time.monotonic()
                    for note in doc.get("unavailable") or []:
                        stderr_warn(f"{label}: {one_line(note)}")
                    items = [
                        i
                        for i in doc["items"]
                        if isinstance(i, dict) and isinstance(i.get("id"), int) and i["id"] not in tried
                    ]
                    if not items:
                        exhausted = True
                    for item in items:
                        tried.add(item["id"])
                        after = max(after, item["id"])
                    deferred = [i for i in items if i.get("sign") == "sha256" and not args.dry_run]
                    for item in items:
                        if item not in deferred:
                            running.add(pool.submit(one, item, fetched))
                    if deferred:
                        running |= _signed(pool, deferred)
                    continue
                finished, running = concurrent.futures.wait(
                    running, timeout=REPORT_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    item, result, detail, measured = future.result()
                    where = printable(str(item.get("path")))
                    counts[result] += 1
                    if args.dry_run:
                        print(f"{label}: {where}: {result}: {detail}", flush=True)
                        continue
                    if result == "later":
                        stderr_warn(f"{label}: {where}: left for the next run: {detail}")
                        continue
                    if measured.get("exists"):
                        counts["exists"] += 1
                        counts[result] -= 1
                    elif result != "uploaded":
                        stderr_warn(f"{label}: {where}: {result}: {detail}")
                    results.append({"id": item["id"], "result": result, "detail": detail, **measured})
                flush(False)
            flush(True)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    finally:
        part_pool.shutdown(wait=True)
    if args.dry_run:
        print(
            f"{label}: {counts['would upload']} would be uploaded, {counts['skipped']} refused, "
            f"{counts['failed']} failing (dry run: nothing sent or reported)",
            flush=True,
        )
        return counts["skipped"] == 0 and counts["failed"] == 0
    later = f", {counts['later']} left for the next run" if counts["later"] else ""
    found = f", {counts['exists']} found at the target" if counts["exists"] else ""
    done = f"{counts['uploaded']} uploaded{found}, {counts['skipped']} refused, {counts['failed']} failed"
    judged = f"the server counts {counts['done']} done, {counts['not done']} blocked or failed"
    print(f"{label}: {done}; {judged}{later}", flush=True)
    return not (counts["skipped"] or counts["failed"] or counts["later"] or counts["not done"])
