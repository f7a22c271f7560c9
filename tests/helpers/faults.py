"""An S3 endpoint that fails on purpose: a threaded HTTP proxy in front of the moto server, with chosen faults."""

from __future__ import annotations

import http.client
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
                if fault is not None:
                    if fault.delay:
                        time.sleep(fault.delay)
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
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                upstream.close()
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
