"""The one-pass reader of a path-sorted upload: blocks of whole lines (``Lines``) and the run directories
they make, each handed out once all its files have passed (``Reader``). Anything it does not take as it is
raises ``Fallback``, and the line-by-line way decides."""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import orjson

from catalog.formats.base import FileEntry
from ckptfleet import jsonsafe
from fleet.agent import MAX_PATH_BYTES, REFUSED_PATH_CHARS, SHA256_HEX
from ingest.inventory.lines import digests_text, facts_stored


class Fallback(Exception):
    """The one-pass path does not take this upload as it is; the line-by-line one decides (and names any error)."""


class Lines:
    """The decompressed upload as blocks of whole lines, the header and the end line kept back and read here.

    Anything odd about the stream itself (a damaged gzip stream, a NUL byte, a line over the limit, a first
    line that is not a header, a cut-off or missing end line) raises ``Fallback``: the line-by-line reader
    then says what is wrong and where.
    """

    BLOCK = 1 << 20

    def __init__(self, stream, max_line: int) -> None:
        self.stream = stream
        self.max_line = max_line
        self.header: dict | None = None
        self.end: dict | None = None

    def _line(self, raw: bytes, kind: str) -> dict:
        if len(raw) > self.max_line:
            raise Fallback
        try:
            obj = jsonsafe.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise Fallback from None
        if not isinstance(obj, dict) or obj.get("type") != kind:
            raise Fallback
        return obj

    def blocks(self) -> Iterator[bytes]:
        """Blocks of the lines between the header and the end line, each ending with a newline."""
        gz = gzip.GzipFile(fileobj=self.stream, mode="rb")
        pending = b""
        try:
            while data := gz.read(self.BLOCK):
                pending += data
                if self.header is None:
                    k = pending.find(b"\n")
                    if k < 0:
                        if len(pending) > self.max_line:
                            raise Fallback
                        continue
                    self.header = self._line(pending[: k + 1], "header")
                    pending = pending[k + 1 :]
                # Keep back the last whole line (it may be the end line) and any part of the next.
                last = pending.rfind(b"\n")
                cut = pending.rfind(b"\n", 0, last) if last > 0 else -1
                if cut < 0:
                    if len(pending) > 2 * self.max_line + self.BLOCK:
                        raise Fallback
                    continue
                block, pending = pending[: cut + 1], pending[cut + 1 :]
                if b"\x00" in block:
                    raise Fallback
                yield block
        except (EOFError, zlib.error, OSError):  # gzip.BadGzipFile is an OSError
            raise Fallback from None
        if self.header is None or not pending.endswith(b"\n") or pending.count(b"\n") != 1:
            raise Fallback
        self.end = self._line(pending, "end")


# Seconds since the epoch that Python's datetime.fromtimestamp surely takes (years 1 and 9999, less two days).
_MTIME_MIN, _MTIME_MAX = -62135596800 + 172800, 253402300799 - 172800
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _second_text(whole: int) -> str:
    """A whole second since the epoch as COPY reads a timestamp, in UTC, to the second."""
    day, second = divmod(whole, 86400)
    d = _EPOCH + timedelta(days=day)
    return f"{d.year:04}-{d.month:02}-{d.day:02} {second // 3600:02}:{second // 60 % 60:02}:{second % 60:02}"


def _orjson_facts(facts: dict) -> str:
    return orjson.dumps(facts, option=orjson.OPT_SORT_KEYS).decode()


# What check_path refuses: a control character or backslash; a '.' or '..' component.
_DOT_PART = re.compile(r"(?:^|/)\.\.?(?:/|$)")


class Reader:
    """The run directories of a path-sorted upload, each handed out once all its files have passed.

    Every line is checked by the rules of ``parse_file_line``; a line that breaks one, is in doubt, or comes
    out of path order raises ``Fallback``, and the line-by-line path then applies the upload or names the line
    and the reason. Lines with facts (manifests only) are parsed with ``json`` exactly as that path parses them,
    the others with orjson, which reads the same values from every line it accepts.

    Every file of a group lies in the range [group + "/", group + "0") (the group of a file is its run
    directory or, above that depth, its directory), so in path order a group is complete once a path outside
    its range arrives. Groups nest (a team directory's own files and its runs), so a few are open at once.
    A group comes as (group, entries, extras): the ``FileEntry`` of each file, as recognition sees it, and
    beside it (the mtime as COPY text, canonical facts text or None), as the row is written.

    ``pg``: the facts go to a jsonb column, so orjson may write their text (the same JSON, not the same
    characters as ``json.dumps``: SQLite keeps the text as written and compares it).
    """

    def __init__(self, lines: Lines, template, max_line: int, *, pg: bool) -> None:
        self.lines = lines
        self.template = template
        self.max_line = max_line
        self.dumps = _orjson_facts if pg else None
        self.files = 0
        self.total = 0

    def groups(self) -> Iterator[tuple[str, list, list]]:

        loads, sha256, modf, dumps = orjson.loads, SHA256_HEX.match, math.modf, self.dumps
        bad_char, dot_part, group_of = REFUSED_PATH_CHARS.search, _DOT_PART.search, self.template.group_of
        seconds: dict[int, str] = {}
        depth, max_line = self.template.depth, self.max_line
        previous = ""
        open_groups: dict[str, tuple[list, list]] = {}
        last = prefix = None  # prefix: the current run directory + "/": every path below it is in it
        entries: list = []
        extras: list = []
        files = total = 0
        for block in self.lines.blocks():
            for raw in block[:-1].split(b"\n"):
                if len(raw) > max_line:
                    raise Fallback
                try:
                    # Too deep a line (JsonTooDeep, a ValueError) goes to the line-by-line reader, which names it.
                    obj = jsonsafe.loads(raw) if b'"facts"' in raw else jsonsafe.check(raw, loads(raw))
                    if obj["type"] != "file":
                        raise Fallback
                    path, size, mtime = obj["path"], obj["size"], obj["mtime"]
                except (ValueError, UnicodeDecodeError, KeyError, TypeError):
                    raise Fallback from None
                if (
                    type(path) is not str
                    or path <= previous  # out of order, reported twice or empty
                    or bad_char(path)
                    or path[0] == "/"
                    or path[-1] == "/"
                    or "//" in path
                    or (("/." in path or path[0] == ".") and dot_part(path))
                    or type(size) is not int
                    or not 0 <= size < 2**63
                    or (type(mtime) is not float and type(mtime) is not int)
                ):
                    raise Fallback
                if not path.isascii():
                    try:
                        if len(path.encode("utf-8")) > MAX_PATH_BYTES:
                            raise Fallback
                    except UnicodeEncodeError:
                        raise Fallback from None
                elif len(path) > MAX_PATH_BYTES:
                    raise Fallback
                # The mtime as whole seconds and microseconds; then its text for COPY, the seconds' part kept.
                whole, us = (mtime, 0) if type(mtime) is int else _microseconds(mtime, modf)
                text = seconds.get(whole)  # the files of one save share a few seconds
                if text is None:
                    if not _MTIME_MIN < whole < _MTIME_MAX:
                        raise Fallback
                    if len(seconds) >= 4096:
                        seconds.clear()
                    text = seconds[whole] = _second_text(whole)
                stamp = f"{text}.{us:06}+00"
                sha = obj.get("sha256")
                if sha is not None and (type(sha) is not str or not sha256(sha)):
                    raise Fallback
                facts = obj.get("facts")
                facts_text = None
                if facts is not None:
                    try:
                        facts_text, facts = facts_stored(facts, dumps)
                    except (ValueError, TypeError):  # not facts, or a value orjson does not write
                        raise Fallback from None
                digests = None
                if "checksums" in obj or "checksummed_at" in obj:
                    try:
                        digests = digests_text(obj, size)
                    except (ValueError, TypeError):
                        raise Fallback from None
                previous = path
                files += 1
                total += size
                mtime = (whole * 1_000_000 + us) / 1_000_000  # as datetime.timestamp() gives it
                entry = FileEntry(path, size, mtime, facts, sha, "sha256" if sha else None, digests)
                if prefix is None or not path.startswith(prefix):
                    group = group_of(path)
                    if group != last:
                        for g in list(open_groups):
                            if g and g != group and not path.startswith(g + "/"):
                                yield (g, *open_groups.pop(g))
                        last = group
                    entries, extras = open_groups.setdefault(group, ([], []))
                    # A run directory holds everything below it; a shallower group only its own files.
                    prefix = group + "/" if group and group.count("/") + 1 >= depth else None
                entries.append(entry)
                extras.append((stamp, facts_text))  # the digests text rides on the entry
        self.files, self.total = files, total
        for g, (group_entries, group_extras) in sorted(open_groups.items(), key=lambda item: item[0], reverse=True):
            yield g, group_entries, group_extras
        open_groups.clear()


def _microseconds(mtime: float, modf=math.modf) -> tuple[int, int]:
    """``mtime`` to the microsecond exactly as ``datetime.fromtimestamp`` rounds it (half to even), as whole seconds
    and microseconds; ``Fallback`` for NaN or infinity (which json reads)."""
    try:
        frac, whole = modf(mtime)
        us, seconds = round(frac * 1e6), int(whole)
    except (ValueError, OverflowError):
        raise Fallback from None
    if us >= 1_000_000:
        return seconds + 1, us - 1_000_000
    if us < 0:
        return seconds - 1, us + 1_000_000
    return seconds, us
