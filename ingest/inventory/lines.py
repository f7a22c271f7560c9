"""Reading an uploaded inventory line by line: every line checked (``check_path``, ``parse_file_line``), the
first problem raised as ``InventoryError`` naming the line and the reason."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

from catalog.digests import dumps as digests_dumps
from catalog.digests import from_line
from ckptfleet import jsonsafe
from fleet.agent import SHA256_HEX, path_problem
from ingest.inventory.rows import InventoryError, Row


def check_path(path: object) -> str:
    """Return ``path`` if it is a safe relative path below a root (the wire contract's rule, ``fleet.agent``), else
    raise ValueError saying why."""
    problem = path_problem(path)
    if problem:
        raise ValueError(problem)
    return cast(str, path)


def parse_file_line(obj: dict) -> Row:
    path = check_path(obj.get("path"))
    size = obj.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size >= 2**63:
        raise ValueError("size must be a non-negative integer")
    mtime = obj.get("mtime")
    if not isinstance(mtime, (int, float)) or isinstance(mtime, bool) or not math.isfinite(mtime):
        raise ValueError("mtime must be a number of seconds since the epoch")
    try:
        when = datetime.fromtimestamp(mtime, UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError("mtime is out of range") from None
    checksum, algo = "", ""
    sha = obj.get("sha256")
    if sha is not None:
        if not isinstance(sha, str) or not SHA256_HEX.match(sha):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        checksum, algo = sha, "sha256"
    facts = obj.get("facts")
    facts_text = None
    if facts is not None:
        facts_text = _facts_text(facts)
    digests = digests_text(obj, size)
    return Row(path, size, when, checksum, algo, facts_text, digests=digests)


def digests_text(obj: dict, size: int, dumps=None) -> str | None:
    """The stored text of a file line's other checksums (``checksums``, ``checksummed_at``); ValueError when bad."""
    checksums, at = obj.get("checksums"), obj.get("checksummed_at")
    if checksums is None and at is None:
        return None
    stored = from_line(checksums, at, size)
    return (dumps or digests_dumps)(stored) if stored else None


def _facts_text(facts: object) -> str:
    """The canonical JSON text of a line's facts, as stored; raises ValueError when they are not facts."""
    return facts_stored(facts)[0]


def facts_text_problem(facts: object) -> str:
    """Why the text in ``facts`` (keys and values, at any depth) is not valid UTF-8, or "" when it is.

    JSON may spell a lone surrogate (``"\\ud800"``), which no UTF-8 text holds: PostgreSQL's jsonb refuses it at
    the insert and orjson at the write, and either crashed the ingest task and left the inventory "processing" for
    two hours (issue 26). Facts are checked like paths (``fleet.agent.path_problem``): the inventory is refused
    whole, naming the line. The agent itself never sends one (``fleet.agent.encode_line`` replaces such facts)."""
    stack = [facts]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "facts hold text that is not valid UTF-8 (a lone surrogate)"
    return ""


def facts_stored(facts: object, dumps=None) -> tuple[str, dict]:
    """The canonical JSON text of a line's facts and the facts it stands for (what recognition sees).

    ``dumps`` writes the text instead of ``json.dumps`` (keys sorted, no spaces) where only the JSON counts.
    """
    if not isinstance(facts, dict) or not isinstance(facts.get("kind"), str):
        raise ValueError('facts must be an object with a "kind"')
    problem = facts_text_problem(facts)
    if problem:
        raise ValueError(problem)
    text = dumps(facts) if dumps is not None else json.dumps(facts, sort_keys=True, separators=(",", ":"))
    if "\\u0000" in text:
        # PostgreSQL's jsonb cannot hold NUL; such a manifest is unreadable to us, not fatal.
        facts = {"kind": str(facts["kind"])[:40], "error": "facts contain a NUL character"}
        text = json.dumps(facts)
    return text, facts


def read_inventory(stream, *, max_line: int, header: dict | None = None) -> Iterator[Row]:
    """Yield every file row of a gzip NDJSON inventory, raising InventoryError at the first problem.

    The header was checked when the upload was received; the trailer must be present (else the
    upload was truncated) and its counts must match.
    """
    gz = gzip.GzipFile(fileobj=stream, mode="rb")
    lineno = 0
    files = 0
    total = 0
    seen_end = False
    try:
        while True:
            raw = gz.readline(max_line + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > max_line:
                raise InventoryError(lineno, f"line is longer than {max_line} bytes")
            if not raw.endswith(b"\n"):
                raise InventoryError(lineno, "the last line is cut off (truncated upload?)")
            if seen_end:
                raise InventoryError(lineno, "content after the end line")
            try:
                obj = jsonsafe.loads(raw, allow_nan=True)  # NaN: refused by the field's own rule
            except jsonsafe.JsonTooDeep as exc:
                raise InventoryError(lineno, str(exc)) from None
            except (ValueError, UnicodeDecodeError):
                raise InventoryError(lineno, "not valid JSON") from None
            if not isinstance(obj, dict):
                raise InventoryError(lineno, "a line must be a JSON object")
            kind = obj.get("type")
            if lineno == 1:
                if kind != "header":
                    raise InventoryError(1, "the first line must be the header")
                if header is not None:
                    header.update(obj)
                continue
            if kind == "file":
                try:
                    row = parse_file_line(obj)
                except ValueError as exc:
                    raise InventoryError(lineno, str(exc)) from None
                files += 1
                total += row.size
                yield row
            elif kind == "end":
                if obj.get("files") != files or obj.get("bytes") != total:
                    raise InventoryError(
                        lineno,
                        f"the end line counts {obj.get('files')} files / {obj.get('bytes')} bytes "
                        f"but the inventory has {files} / {total}",
                    )
                seen_end = True
            elif kind == "header":
                raise InventoryError(lineno, "a second header")
            else:
                raise InventoryError(lineno, f"unknown line type {kind!r}")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InventoryError(lineno + 1, f"the gzip stream is damaged or truncated ({exc})") from None
    if lineno == 0:
        raise InventoryError(None, "the inventory is empty")
    if not seen_end:
        raise InventoryError(lineno, 'no end line: the upload is truncated (expected {"type": "end", ...})')
