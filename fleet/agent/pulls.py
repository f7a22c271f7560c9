"""``--pulls``: the files promotions asked this host to fetch, downloaded beside their target, checked (size,
sha256, the MD5 of a single-part ETag), linked to their name without replacing anything, and reported."""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import hashlib
import http.client
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO

from .cache import ChecksumCache
from .common import HASH_BLOCK, AgentError, human_bytes, one_line, os_reason, printable, stderr_warn
from .contract import AGENT, PULLS_PATH, SHA256_HEX, SINGLE_PART_ETAG, path_problem
from .store import REPORT_EVERY, REPORT_SECONDS, URL_MARGIN_SECONDS, Failed, Later, new_md5, strip_etag
from .upload import send_root
from .wire import fetch_work, report_work

PULL_TEMP_PREFIX = ".ckptfleet-pull-"  # a download in progress, beside its target: .ckptfleet-pull-<random>.tmp
PULL_TEMP_SUFFIX = ".tmp"


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _store_refusal(exc: urllib.error.HTTPError) -> str:
    """The store's error in one line: its status and, from S3's XML body, its code and message."""
    try:
        body = exc.read(8192).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        body = ""
    finally:
        exc.close()
    code = re.search(r"<Code>([^<]{1,100})</Code>", body)
    message = re.search(r"<Message>([^<]{1,300})</Message>", body)
    text = f"the store answered {exc.code} {exc.reason}".rstrip()
    if code:
        text += f": {code.group(1)}"
    if message:
        text += f" ({message.group(1)})"
    return one_line(text)


def _download(url: str, out: BinaryIO, *, size: int, etag: str, timeout: float) -> tuple[int, str, str, bool]:
    """Stream one presigned GET into ``out``; return (bytes, sha256 hex, MD5 hex, encrypted with KMS or SSE-C).

    Raises Later for trouble that may pass, Failed when the store says the object is not the frozen one
    (another ETag, another length, more bytes than frozen) or refuses for good. An OSError is ``out``'s.
    """
    # pull_file lets only http(s) URLs through.
    request = urllib.request.Request(url, headers={"User-Agent": AGENT})  # noqa: S310
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310  # nosec B310 - http(s) only, checked above
    except urllib.error.HTTPError as exc:
        reason = _store_refusal(exc)
        if exc.code in (408, 429) or exc.code >= 500 or (exc.code == 403 and "expired" in reason.lower()):
            raise Later(reason) from None
        raise Failed(reason) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException) else exc
        raise Later(f"cannot reach the store: {os_reason(cause)}") from None
    with response:
        theirs = strip_etag(response.headers.get("ETag"))
        if etag and theirs and theirs != etag:
            raise Failed(f"the store's object has ETag {theirs}, the promotion froze {etag}: it changed since")
        length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) != size:
            raise Failed(f"the store's object has {int(length)} bytes, the promotion froze {size}: it changed since")
        sse = (response.headers.get("x-amz-server-side-encryption") or "").lower()
        encrypted = sse.startswith("aws:kms") or bool(
            response.headers.get("x-amz-server-side-encryption-customer-algorithm")
        )
        sha, md5, n = hashlib.sha256(), new_md5(), 0
        while True:
            try:
                block = response.read(HASH_BLOCK)
            except (OSError, http.client.HTTPException) as exc:
                raise Later(f"the download broke off after {n} bytes: {os_reason(exc)}") from None
            if not block:
                break
            n += len(block)
            if n > size:
                raise Failed(f"the store sent more than the {size} bytes the promotion froze")
            sha.update(block)
            md5.update(block)
            out.write(block)
    return n, sha.hexdigest(), md5.hexdigest(), encrypted


def _same_file(fd: int, name: str, st: os.stat_result, size: int, etag: str, sha256: str) -> tuple[str, str, dict]:
    """What to say about a file already at the target: identical (done) or anything else (never replaced)."""
    if not stat.S_ISREG(st.st_mode):
        return "skipped", "refused: something other than a regular file is at the target; never replaced", {}
    if st.st_size != size:
        return (
            "skipped",
            f"refused: another file ({st.st_size} bytes, not {size}) is at the target; never overwritten",
            {},
        )
    md5_known = bool(SINGLE_PART_ETAG.match(etag))
    if not sha256 and not md5_known:
        return (
            "skipped",
            "refused: a file of the same size is at the target, and with no sha256 or single-part ETag to compare "
            "it cannot be shown identical; never overwritten",
            {},
        )
    try:
        f = os.fdopen(os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd), "rb")
    except OSError as exc:
        return "failed", f"cannot read the file at the target: {os_reason(exc)}", {}
    sha, md5 = hashlib.sha256(), new_md5()
    with f:
        try:
            for block in iter(lambda: f.read(HASH_BLOCK), b""):
                sha.update(block)
                md5.update(block)
        except OSError as exc:
            return "failed", f"cannot read the file at the target: {os_reason(exc)}", {}
    same = sha.hexdigest() == sha256 if sha256 else md5.hexdigest() == etag
    if not same:
        return (
            "skipped",
            "refused: another file of the same size is at the target (its checksum differs); never overwritten",
            {},
        )
    how = "sha256" if sha256 else "MD5 = ETag"
    return "pulled", f"already at the target, identical ({how} checked)", {"size": size, "sha256": sha.hexdigest()}


def _place(fd: int, tmp: str, name: str) -> str:
    """Give the checked temporary file its name, never replacing anything; "" when done, else why not.

    A hard link fails when the name exists, so nothing that appeared meanwhile is lost. File systems
    without hard links get a check then a rename (a writer racing in between would be replaced).
    """
    try:
        os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except FileExistsError:
        return "refused: another file appeared at the target while pulling; never overwritten"
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}:
            raise
        if _lstat(name, fd) is not None:
            return "refused: another file appeared at the target while pulling; never overwritten"
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return ""
    with contextlib.suppress(OSError):
        os.unlink(tmp, dir_fd=fd)
    return ""


def pull_file(
    root: str, item: dict[str, Any], *, timeout: float = 60.0, dry_run: bool = False
) -> tuple[str, str, dict]:
    """Pull one file the server asked for into ``root``: downloaded, checked, never replacing anything.

    Returns (result, detail, measured). "pulled" when the file is now at its target with the frozen
    content (downloaded, or found there already identical), measured being {"size", "sha256"};
    "skipped" ("refused: ...") when the path is not a plain relative path below the root or leads
    through a symlink, or another file is at the target; "failed" when what arrived does not match
    (size, sha256 when known, the MD5 of a single-part ETag; a multipart ETag ``...-N`` is no MD5 and
    is not compared) or the operating system refused. A failed download leaves nothing behind: it is
    written to ``.ckptfleet-pull-*.tmp`` beside its target and only linked to its name, after fsync,
    when it checks out. With ``dry_run`` nothing is written and a download is "would pull".
    Raises Later for trouble that may pass.
    """
    try:
        rel, url, target = item["path"], item["url"], item["target"]
        size = item["size"]
        etag = strip_etag(item.get("etag"))
        sha256 = item.get("sha256") or ""
    except (KeyError, TypeError):
        return "skipped", "refused: the server sent an incomplete item", {}
    if not all(isinstance(v, str) for v in (rel, url, target, sha256)) or not isinstance(size, int) or size < 0:
        return "skipped", "refused: the server sent an incomplete item", {}
    if sha256 and not SHA256_HEX.match(sha256):
        return "skipped", "refused: the server sent a malformed sha256", {}
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root", {}
    parts = rel.split("/")
    if target != root.rstrip("/") + "/" + rel:
        return "skipped", "refused: the target is not the path below this root", {}
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return "skipped", "refused: the download URL is not http(s)", {}
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        return "failed", f"cannot open the root: {os_reason(exc)}", {}
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags | nofollow, dir_fd=fd)
            except FileNotFoundError:
                if dry_run:
                    return "would pull", f"{human_bytes(size)} from {item.get('source') or 'the store'}", {}
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    return "failed", f"cannot make the directory {printable(part)}: {os_reason(exc)}", {}
                try:
                    child = os.open(part, flags | nofollow, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        return "skipped", f"refused: {printable(part)} on its path is not a plain directory", {}
                    return "failed", f"cannot open the directory {printable(part)}: {os_reason(exc)}", {}
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return "skipped", f"refused: {printable(part)} on its path is a symlink or not a directory", {}
                return "failed", f"cannot open the directory {printable(part)}: {os_reason(exc)}", {}
            os.close(fd)
            fd = child
        name = parts[-1]
        try:
            there = _lstat(name, fd)
        except OSError as exc:
            return "failed", f"cannot look at the target: {os_reason(exc)}", {}
        if there is not None:
            return _same_file(fd, name, there, size, etag, sha256)
        if dry_run:
            return "would pull", f"{human_bytes(size)} from {item.get('source') or 'the store'}", {}
        return _fetch_into(fd, name, url, size=size, etag=etag, sha256=sha256, timeout=timeout)
    finally:
        os.close(fd)


def _fetch_into(
    fd: int, name: str, url: str, *, size: int, etag: str, sha256: str, timeout: float
) -> tuple[str, str, dict]:
    tmp = f"{PULL_TEMP_PREFIX}{os.urandom(8).hex()}{PULL_TEMP_SUFFIX}"
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    placed = False
    try:
        try:
            out = os.fdopen(os.open(tmp, create, 0o666, dir_fd=fd), "wb")
        except OSError as exc:
            return "failed", f"cannot create a temporary file beside the target: {os_reason(exc)}", {}
        try:
            with out:
                n, got_sha, got_md5, encrypted = _download(url, out, size=size, etag=etag, timeout=timeout)
                out.flush()
                os.fsync(out.fileno())
        except Failed as exc:
            return "failed", str(exc), {}
        except OSError as exc:
            return "failed", f"cannot write it: {os_reason(exc)}", {}
        measured = {"size": n, "sha256": got_sha}
        if n != size:
            return "failed", f"{n} bytes arrived; the promotion froze {size}", measured
        checked = ["size"]
        if sha256:
            if got_sha != sha256:
                return "failed", f"the sha256 of what arrived is {got_sha}; the catalog has {sha256}", measured
            checked.append("sha256")
        if SINGLE_PART_ETAG.match(etag) and not encrypted:
            if got_md5 != etag:
                return (
                    "failed",
                    f"the MD5 of what arrived is {got_md5}; the ETag (MD5 of a single-part upload) is {etag}",
                    measured,
                )
            checked.append("MD5 = ETag")
        try:
            refused = _place(fd, tmp, name)
        except OSError as exc:
            return "failed", f"cannot put it in place: {os_reason(exc)}", {}
        if refused:
            return "skipped", refused, {}
        placed = True
        with contextlib.suppress(OSError):
            os.fsync(fd)  # the new name survives a crash
        return "pulled", f"pulled {human_bytes(n)}; {', '.join(checked)} checked", measured
    finally:
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)


def fetch_pulls(server: str, token: str, root: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """The files this host was asked to pull below ``root``, each with a presigned URL: {"items": [...], ...}."""
    return fetch_work(PULLS_PATH, server, token, root, timeout=timeout)


def report_pulls(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return report_work(PULLS_PATH, server, token, results, timeout=timeout)


def pull_root(args: argparse.Namespace, root: str, server: str, token: str, cache: ChecksumCache | None) -> bool:
    """Pull this root's files and report each; then report the root itself. True when every file is in place."""
    label = f"{args.host}:{root}"
    tried: set[Any] = set()
    counts: collections.Counter[str] = collections.Counter()
    try:
        while True:
            doc = fetch_pulls(server, token, root, timeout=args.timeout)
            fetched = time.monotonic()
            for note in doc.get("unavailable") or []:
                stderr_warn(f"{label}: {one_line(note)}")
            items = [
                i for i in doc["items"] if isinstance(i, dict) and isinstance(i.get("id"), int) and i["id"] not in tried
            ]
            if not items:
                break
            results: list[dict[str, Any]] = []
            reported = time.monotonic()
            started = len(tried)
            for item in items:
                lifetime = item.get("expires_in")
                if isinstance(lifetime, (int, float)) and lifetime > 0:
                    margin = min(URL_MARGIN_SECONDS, lifetime / 4)
                    if time.monotonic() > fetched + lifetime - margin:
                        break  # its URL is about to expire: report what is done and ask for fresh ones
                tried.add(item["id"])
                where = printable(str(item.get("path")))
                measured: dict[str, Any]
                if item.get("root") != root:
                    result, detail, measured = "skipped", "refused: the item is not below this root", {}
                else:
                    try:
                        result, detail, measured = pull_file(root, item, timeout=args.timeout, dry_run=args.dry_run)
                    except Later as exc:
                        counts["later"] += 1
                        stderr_warn(f"{label}: {where}: left for the next run: {exc}")
                        continue
                counts[result] += 1
                if args.dry_run:
                    print(f"{label}: {where}: {result}: {detail}", flush=True)
                    continue
                if result != "pulled":
                    stderr_warn(f"{label}: {where}: {result}: {detail}")
                results.append({"id": item["id"], "result": result, "detail": detail, **measured})
                if len(results) >= REPORT_EVERY or time.monotonic() - reported >= REPORT_SECONDS:
                    answer = report_pulls(server, token, results, timeout=args.timeout)
                    results, reported = [], time.monotonic()
                    if answer.get("ignored"):
                        break  # a promotion ended meanwhile (cancelled): ask which files are still wanted
            if results:
                report_pulls(server, token, results, timeout=args.timeout)
            if len(tried) == started:
                raise AgentError("the server's URLs expire before a download can start; nothing was pulled")
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    if args.dry_run:
        print(
            f"{label}: {counts['would pull']} would be pulled, {counts['pulled']} already in place, "
            f"{counts['skipped']} refused, {counts['failed']} failing (dry run: nothing written or reported)",
            flush=True,
        )
        return counts["skipped"] == 0 and counts["failed"] == 0
    later = f", {counts['later']} left for the next run" if counts["later"] else ""
    print(
        f"{label}: {counts['pulled']} pulled, {counts['skipped']} refused, {counts['failed']} failed{later}",
        flush=True,
    )
    if counts["pulled"]:
        # The catalog learns of the new copy from the root's inventory, as of every file on this host.
        send_root(args, root, server, token, cache)
    return counts["skipped"] == 0 and counts["failed"] == 0 and counts["later"] == 0
