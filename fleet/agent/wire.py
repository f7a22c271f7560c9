"""Talking to the server: one request at a time over http.client (through the environment's proxy), one-line
refusals from its answers, the work lists of deletions, pulls and offloads, and the token and server URL."""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any, BinaryIO

from .common import HASH_BLOCK, AgentError, one_line, os_reason, printable
from .contract import AGENT


def open_connection(
    url: urllib.parse.SplitResult, timeout: float
) -> tuple[http.client.HTTPConnection, str, list[tuple[str, str]]]:
    """A connection for ``url``, through the proxy the environment names if any; the request target;
    and the headers the proxy needs on each request."""
    host = url.hostname or ""
    port = url.port
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    proxy_url = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(url.scheme)
    if not proxy_url:
        if url.scheme == "https":
            return (
                http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context()),
                target,
                [],
            )
        return http.client.HTTPConnection(host, port, timeout=timeout), target, []
    proxy = urllib.parse.urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    auth: list[tuple[str, str]] = []
    if proxy.username:
        credentials = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        auth.append(("Proxy-Authorization", "Basic " + base64.b64encode(credentials.encode()).decode()))
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            proxy.hostname or "", proxy.port or 80, timeout=timeout, context=ssl.create_default_context()
        )
        conn.set_tunnel(host, port or 443, headers=dict(auth))
        return conn, target, []
    # A plain-HTTP proxy takes the absolute URL as the request target.
    return (
        http.client.HTTPConnection(proxy.hostname or "", proxy.port or 80, timeout=timeout),
        url.geturl(),
        auth,
    )


def send_request(
    method: str,
    url: str,
    token: str,
    *,
    timeout: float,
    body: BinaryIO | None = None,
    length: int = 0,
    headers: Iterable[tuple[str, str]] = (),
) -> tuple[int, str, bytes]:
    """Send one request; return (status, reason, up to 1 MiB of the answer). Network trouble -> AgentError."""
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.scheme}://{parts.netloc}"
    try:
        conn, target, proxy_headers = open_connection(parts, timeout)
    except ValueError as exc:
        raise AgentError(f"bad server URL {url!r}: {exc}", fatal=True) from None
    try:
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            conn.putheader("Authorization", f"Bearer {token}")
            conn.putheader("User-Agent", AGENT)
            conn.putheader("Accept", "application/json")
            for name, value in [*proxy_headers, *headers]:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
        except (OSError, http.client.HTTPException) as exc:
            raise AgentError(f"cannot reach server {where}: {os_reason(exc)}", fatal=True) from None
        sent_error: BaseException | None = None
        if body is not None:
            try:
                while True:
                    block = body.read(HASH_BLOCK)
                    if not block:
                        break
                    conn.send(block)
            except OSError as exc:
                # The server may refuse after reading the header and hang up; its answer, if it got
                # through, explains more than the broken pipe does.
                sent_error = exc
        try:
            response = conn.getresponse()
            answer = response.read(1024 * 1024)
        except (OSError, http.client.HTTPException) as exc:
            cause = sent_error or exc
            raise AgentError(f"connection to server {where} failed: {os_reason(cause)}", fatal=True) from None
        return response.status, response.reason, answer
    finally:
        conn.close()


def answer_json(answer: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(answer.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def refusal(status: int, reason: str, answer: bytes) -> str:
    """One line from an error answer: the server's JSON ``detail`` (or ``error``) when it sent one."""
    message = f"server answered {status} {reason}".rstrip()
    doc = answer_json(answer)
    if doc:
        detail = doc.get("detail") or doc.get("error")
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail)
        if detail:
            message += f": {detail}"
        if doc.get("fields"):
            message += f" {json.dumps(doc['fields'])}"
    return one_line(message, 500)


def fetch_work(
    path: str, server: str, token: str, root: str, *, timeout: float, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """GET the server's work for this host below ``root`` (deletions, pulls): a document with a list of items."""
    url = server.rstrip("/") + path + "?" + urllib.parse.urlencode({"root": root, **(extra or {})})
    status, reason, answer = send_request("GET", url, token, timeout=timeout)
    if status != 200:
        raise AgentError(refusal(status, reason, answer), fatal=status in (401, 403))
    doc = answer_json(answer)
    if doc is None or not isinstance(doc.get("items"), list):
        raise AgentError(f"server answered without a list of items: {one_line(answer[:200])}")
    return doc


def post_json(path: str, server: str, token: str, doc: dict[str, Any], *, timeout: float, ok=(200,)) -> dict:
    """POST ``doc`` as JSON to the server's ``path``; the answer's JSON, or AgentError naming the refusal."""
    body = json.dumps(doc).encode()
    status, reason, answer = send_request(
        "POST",
        server.rstrip("/") + path,
        token,
        timeout=timeout,
        body=io.BytesIO(body),
        length=len(body),
        headers=[("Content-Type", "application/json")],
    )
    if status not in ok:
        raise AgentError(refusal(status, reason, answer), fatal=status in (401, 403))
    return answer_json(answer) or {}


def report_work(path: str, server: str, token: str, results: list[dict[str, Any]], *, timeout: float) -> dict:
    """POST what became of each item fetched from ``path``."""
    return post_json(path, server, token, {"results": results}, timeout=timeout)


def read_token(args: argparse.Namespace) -> str:
    path = args.token_file
    token = None
    if not path:
        token = os.environ.get("CKPTFLEET_TOKEN") or None
        path = None if token else os.environ.get("CKPTFLEET_TOKEN_FILE")
    if token is None:
        if not path:
            raise AgentError("no token: set CKPTFLEET_TOKEN, or CKPTFLEET_TOKEN_FILE or --token-file to a file")
        try:
            with open(path, "rb") as f:
                raw = f.read(4096)
        except OSError as exc:
            raise AgentError(f"cannot read token file {printable(path)}: {os_reason(exc)}") from None
        try:
            token = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AgentError(f"token file {printable(path)} does not hold a token (not ASCII)") from None
        source = f"token file {printable(path)}"
    else:
        token = token.strip()
        source = "CKPTFLEET_TOKEN"
    if not token or not token.isprintable() or any(c.isspace() for c in token):
        raise AgentError(f"{source} does not hold a single-line token")
    return token


def check_server(server: str | None) -> str:
    if not server:
        raise AgentError("no server: pass --server URL or set CKPTFLEET_SERVER")
    parts = urllib.parse.urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentError(f"server URL {server!r} must look like https://fleet.example.com")
    return server.rstrip("/")
