"""An S3 endpoint that fails on purpose: a threaded HTTP proxy in front of the moto server, with chosen faults."""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Fault:
    """Answer requests that ``match(method, path, query)`` with an error, ``times`` times (None: always)."""

    match: Callable[[str, str, dict], bool]
    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    times: int | None = None
    delay: float = 0.0
    served: int = 0
    # What the fault does: "error" (answer with the error above), "reset" (close the connection before
    # the store sees the request), "reset_after" (forward it, then close the connection without the
    # answer: the store did the work, the client never hears), "partial" (DeleteObjects: forward only every
    # other key, and answer the others with ``code`` as per-key errors, as S3 does under load), "lie"
    # (DeleteObjects: do nothing, and answer that every key asked for was deleted, as a broken gateway might).
    action: str = "error"


class FaultyEndpoint:
    """An S3 endpoint that fails on purpose: a threaded HTTP proxy in front of the moto server."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, match: Callable[[str, str, dict], bool], **kwargs) -> Fault:
        fault = Fault(match=match, **kwargs)
        self.faults.append(fault)
        return fault

    def pick(self, method: str, path: str, query: dict) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.match(method, path, query) and (fault.times is None or fault.served < fault.times):
                    fault.served += 1
                    return fault
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                parts = urlsplit(self.path)
                query = parse_qs(parts.query, keep_blank_values=True)
                fault = endpoint.pick(self.command, parts.path, query)
                if fault is not None and fault.delay:
                    time.sleep(fault.delay)
                if fault is not None and fault.action == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None and fault.action == "lie" and body:
                    lie = _all_deleted(body)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(lie)))
                    self.end_headers()
                    self.wfile.write(lie)
                    return
                refused: list[bytes] = []
                if fault is not None and fault.action == "partial" and body:
                    body, refused = _split_delete(body)
                    fault = None if not refused else fault
                if fault is not None and fault.action == "error":
                    error = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{fault.code}</Code>'
                        f"<Message>{fault.message}</Message><RequestId>fault</RequestId></Error>"
                    ).encode()
                    try:
                        self.send_response(fault.status)
                        self.send_header("Content-Type", "application/xml")
                        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(error)))
                        self.end_headers()
                        if self.command != "HEAD":
                            self.wfile.write(error)
                    except OSError:
                        pass  # the client gave up waiting (a timeout fault)
                    return
                upstream = http.client.HTTPConnection(endpoint.upstream.hostname, endpoint.upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                if refused:  # the body changed: its length and checksums with it
                    headers = {
                        k: v
                        for k, v in headers.items()
                        if k.lower() not in ("content-length", "content-md5")
                        and not k.lower().startswith("x-amz-checksum")
                    }
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                upstream.close()
                if fault is not None and fault.action == "reset_after":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if refused:
                    data = _add_errors(data, refused, fault.code if fault else "InternalError")
                self.send_response(answer.status, answer.reason)
                for name, value in answer.getheaders():
                    if name.lower() in ("transfer-encoding", "connection", "server", "date"):
                        continue
                    if name.lower() == "content-length" and self.command != "HEAD":
                        continue
                    self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_one

            def log_message(self, format, *args):
                pass

        return Handler


_OBJECT = re.compile(rb"<Object>.*?</Object>", re.S)
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)
_VERSION = re.compile(rb"<VersionId>(.*?)</VersionId>", re.S)


def _split_delete(body: bytes) -> tuple[bytes, list[bytes]]:
    """A DeleteObjects body with every other object taken out, and the objects taken out."""
    objects = _OBJECT.findall(body)
    refused = objects[1::2]
    for obj in refused:
        body = body.replace(obj, b"", 1)
    return body, refused


def _add_errors(answer: bytes, refused: list[bytes], code: str) -> bytes:
    """The store's DeleteResult with a per-key <Error> for each object the proxy kept from it."""
    errors = b""
    for obj in refused:
        key = _KEY.search(obj)
        version = _VERSION.search(obj)
        errors += (
            b"<Error><Key>"
            + (key.group(1) if key else b"")
            + b"</Key>"
            + (b"<VersionId>" + version.group(1) + b"</VersionId>" if version else b"")
            + b"<Code>"
            + code.encode()
            + b"</Code><Message>We encountered an internal error.</Message></Error>"
        )
    return answer.replace(b"</DeleteResult>", errors + b"</DeleteResult>", 1)


def _all_deleted(body: bytes) -> bytes:
    """A DeleteResult that says every object of a DeleteObjects body was deleted (the store was never asked)."""
    deleted = b""
    for obj in _OBJECT.findall(body):
        key = _KEY.search(obj)
        version = _VERSION.search(obj)
        deleted += (
            b"<Deleted><Key>"
            + (key.group(1) if key else b"")
            + b"</Key>"
            + (b"<VersionId>" + version.group(1) + b"</VersionId>" if version else b"")
            + b"</Deleted>"
        )
    return (
        b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        + deleted
        + b"</DeleteResult>"
    )
