"""Talking to the object store with presigned URLs (pulls and offloads): kept-alive connections, a PUT that
hashes what it sends, retries of trouble that may pass, and the store's errors in one line."""

from __future__ import annotations

import hashlib
import http.client
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, BinaryIO

from .common import HASH_BLOCK, one_line, os_reason
from .contract import AGENT
from .wire import open_connection

URL_MARGIN_SECONDS = 60.0  # a presigned URL this close to expiring is asked for again before its download
REPORT_EVERY = 50  # pull results per report at most
REPORT_SECONDS = 15.0  # and at least this often while files arrive, so the server shows progress


class Later(Exception):
    """Trouble that may pass (the network, the store's 5xx, an expired URL): the file is left for the next run."""


class Failed(Exception):
    """The file cannot be pulled as it was asked for: it is reported failed, with this one-line reason."""


def new_md5() -> Any:
    try:
        return hashlib.md5(usedforsecurity=False)
    except TypeError:  # Python 3.8
        return hashlib.md5()  # noqa: S324  # nosec B324 - compared with an ETag, not used for security


def strip_etag(value: object) -> str:
    return str(value or "").strip().strip('"')


class StoreAnswer(Exception):
    """The store answered a request with an error status; ``text`` is its one-line reason."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _store_reason(status: int, reason: str, body: bytes) -> str:
    text = body[:8192].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]{1,100})</Code>", text)
    message = re.search(r"<Message>([^<]{1,300})</Message>", text)
    line = f"the store answered {status} {reason}".rstrip()
    if code:
        line += f": {code.group(1)}"
    if message:
        line += f" ({message.group(1)})"
    return one_line(line)


def _may_pass(status: int, text: str) -> bool:
    """Trouble worth trying again: throttling, the store's 5xx, a URL that expired."""
    return status in (408, 429) or status >= 500 or (status == 403 and "expired" in text.lower())


class StoreConnections:
    """One kept-alive connection per store address, per thread: 10,000 small PUTs need not 10,000 handshakes."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.local = threading.local()

    def get(self, url: urllib.parse.SplitResult) -> tuple[http.client.HTTPConnection, str, list[tuple[str, str]], bool]:
        """A connection for ``url``'s store, its request target, the proxy's headers, and whether it was used before."""
        pool = self.local.__dict__.setdefault("pool", {})
        key = (url.scheme, url.netloc)
        found = pool.get(key)
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        if found is not None:
            conn, proxy_target, headers = found
            return conn, (url.geturl() if proxy_target else target), headers, True
        conn, request_target, headers = open_connection(url, self.timeout)
        pool[key] = (conn, request_target != target, headers)
        return conn, request_target, headers, False

    def drop(self, url: urllib.parse.SplitResult) -> None:
        pool = self.local.__dict__.setdefault("pool", {})
        found = pool.pop((url.scheme, url.netloc), None)
        if found is not None:
            found[0].close()


def put_range(
    conns: StoreConnections,
    url: str,
    f: BinaryIO,
    *,
    offset: int,
    length: int,
    headers: dict[str, str],
    hashers: list[Any],
) -> tuple[int, str, bool, list[Any]]:
    """PUT ``length`` bytes of ``f`` from ``offset`` to a presigned URL, hashing them as they go.

    ``hashers`` are left as they are: copies of them are fed and returned. Returns (bytes sent, the
    store's ETag, whether the store encrypted with KMS or a customer key, which makes an ETag no MD5,
    the fed hashers). Raises StoreAnswer for an error status, OSError for the network or the file.
    A kept-alive connection the store closed meanwhile is replaced at once, once.
    """
    parts = urllib.parse.urlsplit(url)
    for attempt in (1, 2):
        conn, target, proxy_headers, reused = conns.get(parts)
        fed = [h.copy() for h in hashers]
        f.seek(offset)
        sent = 0
        try:
            conn.putrequest("PUT", target, skip_host=False, skip_accept_encoding=True)
            conn.putheader("User-Agent", AGENT)
            conn.putheader("Content-Length", str(length))
            for name, value in [*proxy_headers, *headers.items()]:
                conn.putheader(name, value)
            conn.endheaders()
            send_error: OSError | None = None
            while sent < length:
                block = f.read(min(HASH_BLOCK, length - sent))
                if not block:
                    raise Failed(f"the file ended after {offset + sent} bytes: it changed while it was read")
                for h in fed:
                    h.update(block)
                sent += len(block)
                try:
                    conn.send(block)
                except OSError as exc:  # the store may answer (412, 400) before taking the whole body
                    send_error = exc
                    break
            response = conn.getresponse()
            answer = response.read()
        except (BrokenPipeError, ConnectionResetError) as exc:  # RemoteDisconnected among them
            conns.drop(parts)
            if attempt == 1 and reused:
                continue  # a kept-alive connection the store had closed: once more, at once, on a fresh one
            raise OSError(exc.errno or 0, f"the connection broke off: {os_reason(exc)}") from None
        except (OSError, http.client.HTTPException) as exc:
            conns.drop(parts)
            if isinstance(exc, OSError):
                raise
            raise OSError(0, f"the store's answer was garbled: {one_line(exc)}") from None
        if response.will_close:
            conns.drop(parts)
        if response.status >= 300:
            raise StoreAnswer(response.status, _store_reason(response.status, response.reason, answer))
        if send_error is not None:
            raise OSError(send_error.errno or 0, f"the upload broke off: {os_reason(send_error)}")
        sse = (response.getheader("x-amz-server-side-encryption") or "").lower()
        keyed = sse.startswith(("aws:kms", "aws:kms:dsse")) or bool(
            response.getheader("x-amz-server-side-encryption-customer-algorithm")
        )
        return sent, strip_etag(response.getheader("ETag")), keyed, fed
    raise OSError(0, "the connection broke off")  # pragma: no cover - the loop returns or raises


def with_retries(work: Callable[[], Any], what: str, retries: int) -> Any:
    """Run ``work``, again after a pause while the trouble may pass; Later when it does not, Failed for good."""
    delay = 0.5
    for attempt in range(1, retries + 1):
        try:
            return work()
        except StoreAnswer as exc:
            if not _may_pass(exc.status, exc.text):
                raise Failed(f"{what}: {exc.text}") from None
            if attempt == retries or exc.status == 403:
                raise Later(f"{what}: {exc.text}") from None
        except OSError as exc:
            if attempt == retries:
                raise Later(f"{what}: cannot reach the store: {os_reason(exc)}") from None
        time.sleep(delay)
        delay *= 2
    raise Later(what)  # pragma: no cover


def hash_rest(f: BinaryIO, offset: int, hashers: list[Any]) -> int:
    f.seek(offset)
    n = offset
    for block in iter(lambda: f.read(HASH_BLOCK), b""):
        for h in hashers:
            h.update(block)
        n += len(block)
    return n
