"""Sending a root's inventory: written as gzip NDJSON to a temporary file, POSTed, and (``--wait``) polled until
the server has applied or failed it."""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from .cache import ChecksumCache
from .common import AgentError, human_bytes, one_line, os_reason
from .contract import INVENTORIES_PATH
from .walk import inventory_lines, write_lines
from .wire import answer_json, refusal, send_request

if TYPE_CHECKING:
    from .common import Warn


def upload_inventory(server: str, token: str, body: BinaryIO, length: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """POST a gzip NDJSON inventory of ``length`` bytes, streamed from ``body``; return the 202 answer."""
    url = server.rstrip("/") + INVENTORIES_PATH
    status, reason, answer = send_request(
        "POST",
        url,
        token,
        timeout=timeout,
        body=body,
        length=length,
        headers=[("Content-Type", "application/x-ndjson"), ("Content-Encoding", "gzip")],
    )
    if status != 202:
        raise AgentError(refusal(status, reason, answer), fatal=status == 401)
    doc = answer_json(answer)
    if doc is None or "id" not in doc:
        raise AgentError(f"server answered 202 without an inventory id: {one_line(answer[:200])}")
    return doc


def wait_for_inventory(
    server: str, token: str, url: str, *, timeout: float = 60.0, wait_timeout: float = 1800.0
) -> dict[str, Any]:
    """Poll an inventory until it is applied or failed; return its last state."""
    poll = urllib.parse.urljoin(server.rstrip("/") + INVENTORIES_PATH, url)
    deadline = time.monotonic() + wait_timeout
    delay = 0.5
    while True:
        status, reason, answer = send_request("GET", poll, token, timeout=timeout)
        if status != 200:
            raise AgentError(refusal(status, reason, answer), fatal=status == 401)
        doc = answer_json(answer) or {}
        if doc.get("status") in ("applied", "failed"):
            return doc
        if time.monotonic() + delay > deadline:
            raise AgentError(f"inventory still {doc.get('status')!r} after {wait_timeout:g} s; see {poll}")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _spool_error(exc: OSError) -> AgentError:
    return AgentError(
        f"cannot write the inventory to a temporary file in {tempfile.gettempdir()} "
        f"(point TMPDIR elsewhere?): {os_reason(exc)}",
        fatal=True,
    )


def write_inventory(
    out: IO[bytes],
    root: str,
    host: str,
    *,
    checksums: bool = False,
    cache: ChecksumCache | None = None,
    warn: Warn | None = None,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Write one whole inventory of ``root`` to ``out`` as the gzip NDJSON body; return the trailer."""
    lines = inventory_lines(root, host, checksums=checksums, cache=cache, warn=warn, allow_empty=allow_empty)
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=0) as gz:
        return write_lines(lines, gz)


def send_root(args: argparse.Namespace, root: str, server: str, token: str, cache: ChecksumCache | None) -> None:
    label = f"{args.host}:{root}"
    try:
        try:
            # On disk, not in memory: a root of millions of files makes a body of hundreds of MB.
            spool = tempfile.TemporaryFile(prefix="ckptfleet-agent-")
        except OSError as exc:
            raise _spool_error(exc) from None
        with spool:
            try:
                trailer = write_inventory(
                    spool, root, args.host, checksums=args.checksums, cache=cache, allow_empty=args.allow_empty
                )
                length = spool.tell()
                spool.seek(0)
            except OSError as exc:
                raise _spool_error(exc) from None
            answer = upload_inventory(server, token, spool, length, timeout=args.timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    print(
        f"{label}: {trailer['files']} files, {human_bytes(trailer['bytes'])} sent as inventory "
        f"{answer['id']} ({answer.get('status', '?')})",
        flush=True,
    )
    if not args.wait:
        return
    url = answer.get("url") or f"{INVENTORIES_PATH}{answer['id']}/"
    try:
        state = wait_for_inventory(server, token, url, timeout=args.timeout, wait_timeout=args.wait_timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: inventory {answer['id']}: {exc}", fatal=exc.fatal) from None
    if state["status"] == "failed":
        where = f" at line {state['error_line']}" if state.get("error_line") else ""
        raise AgentError(f"{label}: inventory {answer['id']} failed{where}: {one_line(state.get('error'))}")
    counts = [
        f"{state[key]} {word}"
        for key, word in (
            ("files_added", "added"),
            ("files_changed", "changed"),
            ("files_gone", "gone"),
            ("checkpoints_found", "checkpoints found"),
        )
        if state.get(key) is not None
    ]
    print(
        f"{label}: inventory {answer['id']} applied" + (f": {', '.join(counts)}" if counts else ""),
        flush=True,
    )
