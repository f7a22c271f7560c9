"""The CRCs S3 stores (crc32, and crc32c and crc64nvme with the optional module awscrt): combining them, per block
and per part, and the members of a ``torch.save`` zip checked from the same bytes (``CrcPass``)."""

from __future__ import annotations

import base64
import bisect
import struct
import zlib
from typing import Any, BinaryIO

from .common import MIB
from .facts import read_at, zip_end_candidates

try:  # optional: hardware CRC32C and CRC64/NVME (pip install awscrt); the agent runs without it
    from awscrt import checksums as _crt
except ImportError:
    _crt = None

# The CRCs this agent sends besides sha256: crc32 always (zlib), the others when awscrt imports.
CRC_ALGORITHMS: tuple[str, ...] = ("crc32", "crc32c", "crc64nvme") if _crt is not None else ("crc32",)
CRC_BLOCK_MIN = MIB  # block CRCs: 1 MiB blocks, doubled while a file would have more than
CRC_MAX_BLOCKS = 10_000  # this many (S3's part limit, which boto3 doubles its 8 MiB part size to meet)
CHECKSUM_CHUNK = MIB  # one read; a divisor of every block size, so reads never straddle a block
ZIP_DIRECTORY_MAX_BYTES = 64 * MIB
MEMBERS_BAD_MAX = 10
# The CRCs S3 stores (AWS "Checking object integrity"): all reflected, with all-ones init and xorout,
# so they combine like zlib's crc32_combine. (width in bits, reflected polynomial)
CRC_PARAMS: dict[str, tuple[int, int]] = {
    "crc32": (32, 0xEDB88320),
    "crc32c": (32, 0x82F63B78),
    "crc64nvme": (64, 0x9A6C9329AC4BC9B5),
}


class _CrcMath:
    """Polynomial arithmetic modulo one CRC's polynomial, in its reflected bit order (zlib's crc32.c).

    ``crc(A + B) = crc(A) * x^(8 * len(B)) + crc(B)`` (mod P): combining is one multiplication by an
    operator that depends on len(B) only, so the operators of lengths seen often are kept.
    """

    def __init__(self, width: int, poly: int) -> None:
        self.width = width
        self.poly = poly
        self.one = 1 << (width - 1)  # x^0 in reflected order
        # x^(2^k) mod P for k up to 71: enough for any length below 2^64 bytes (the 3 is 8 bits a byte).
        table = [1 << (width - 2)]
        for _ in range(71):
            table.append(self.mult(table[-1], table[-1]))
        self._x2n = table
        self._ops: dict[int, int] = {}
        self._tables: dict[int, list[list[int]]] = {}

    def mult(self, a: int, b: int) -> int:
        if not a:
            return 0
        m, p, poly = self.one, 0, self.poly
        while True:
            if a & m:
                p ^= b
                if not a & (m - 1):
                    return p
            m >>= 1
            b = (b >> 1) ^ poly if b & 1 else b >> 1

    def operator(self, nbytes: int) -> int:
        """x^(8 * nbytes) mod P."""
        op = self._ops.get(nbytes)
        if op is None:
            op, k, n = self.one, 3, nbytes
            while n:
                if n & 1:
                    op = self.mult(self._x2n[k], op)
                n >>= 1
                k += 1
            if len(self._ops) >= 4096:
                self._ops.clear()  # member boundaries make many lengths; only the block size recurs
            self._ops[nbytes] = op
        return op

    def combine(self, crc1: int, crc2: int, len2: int) -> int:
        if len2 <= 0:
            return crc1
        if len2 % MIB:
            return self.mult(self.operator(len2), crc1) ^ crc2
        # Whole MiB: a buffer or a block, joined thousands of times a file. Multiplying by a fixed
        # operator is linear, so it is a lookup per byte of crc1 in tables made once per length.
        tables = self._tables.get(len2) or self._table(len2)
        out = crc2
        for table in tables:
            out ^= table[crc1 & 0xFF]
            crc1 >>= 8
        return out

    def _table(self, nbytes: int) -> list[list[int]]:
        op = self.operator(nbytes)
        basis = [self.mult(op, 1 << bit) for bit in range(self.width)]
        tables = []
        for low in range(0, self.width, 8):
            table = [0]
            for bit in range(8):
                table += [value ^ basis[low + bit] for value in table]
            tables.append(table)
        if len(self._tables) >= 64:
            self._tables.clear()
        self._tables[nbytes] = tables
        return tables


_CRC_MATH = {algo: _CrcMath(*params) for algo, params in CRC_PARAMS.items()}
_CRC_HEX_DIGITS = {"crc32": 8, "crc32c": 8, "crc64nvme": 16}


def crc_combine(algo: str, crc1: int, crc2: int, len2: int) -> int:
    """The CRC (``"crc32"``, ``"crc32c"`` or ``"crc64nvme"``) of A + B from crc(A), crc(B) and len(B).

    Pure Python (zlib's crc32_combine, generalised to any reflected CRC with all-ones init and
    xorout): a few microseconds, whether or not awscrt is installed.
    """
    if algo not in _CRC_MATH:
        raise ValueError(f"unknown CRC {algo!r}; known: {', '.join(CRC_PARAMS)}")
    if len2 < 0:
        raise ValueError("len2 must be >= 0")
    return _CRC_MATH[algo].combine(crc1, crc2, len2)


def crc_block_size(size: int) -> int:
    """The block size of a file of ``size`` bytes: 1 MiB, doubled while it would make over 10,000 blocks.

    So it is a power-of-two number of MiB, never larger than the part size boto3 and the aws CLI
    choose (8 MiB, doubled while over 10,000 parts), and every such part boundary is a block boundary.
    """
    block = CRC_BLOCK_MIN
    while -(-size // block) > CRC_MAX_BLOCKS:
        block *= 2
    return block


def crc_of_blocks(algo: str, block_crcs: list[int], block_size: int, total_size: int, part_size: int) -> list[int]:
    """The CRC of each part of a ``total_size``-byte file cut into ``part_size`` parts (the last shorter),
    combined from the CRCs of its ``block_size`` blocks (the last shorter) as the agent sends them.

    An S3 multipart object's composite checksum is then the CRC of the parts' big-endian CRCs
    concatenated, with ``-<len(parts)>``. Raises ValueError when ``part_size`` is not a multiple of
    ``block_size`` or the block count does not fit the size.
    """
    if algo not in _CRC_MATH:
        raise ValueError(f"unknown CRC {algo!r}; known: {', '.join(CRC_PARAMS)}")
    if block_size <= 0 or part_size <= 0 or part_size % block_size:
        raise ValueError(f"part size {part_size} is not a multiple of the block size {block_size}")
    if total_size < 0 or len(block_crcs) != -(-total_size // block_size):
        raise ValueError(f"{len(block_crcs)} block CRCs do not make a file of {total_size} bytes")
    math_ = _CRC_MATH[algo]
    per_part = part_size // block_size
    parts = []
    for first in range(0, len(block_crcs), per_part):
        value = block_crcs[first]
        for i in range(first + 1, min(first + per_part, len(block_crcs))):
            value = math_.combine(value, block_crcs[i], min(block_size, total_size - i * block_size))
        parts.append(value)
    return parts


def _crc_hex(algo: str, value: int) -> str:
    return format(value, f"0{_CRC_HEX_DIGITS[algo]}x")


class ZipMember:
    """One member of a zip being checked: where its data lies, what its CRC must be, and what was seen."""

    __slots__ = ("bad", "crc", "done", "end", "inflater", "method", "name", "out", "seen", "size", "start")

    def __init__(self, name: str, start: int, end: int, method: int, crc: int, size: int) -> None:
        self.name, self.start, self.end, self.method, self.crc, self.size = name, start, end, method, crc, size
        self.bad = ""  # why it is bad, known before its data is read (a broken header, data past the end)
        self.seen = 0  # CRC32 of its stored bytes (STORED) or of what they inflate to (DEFLATED)
        self.done = 0  # stored bytes fed so far
        self.out = 0  # bytes inflated so far
        self.inflater: Any = zlib.decompressobj(-15) if method == _ZIP_DEFLATED else None

    def add(self, crc: int, length: int) -> None:
        """The CRC32 of the next ``length`` stored bytes of this (STORED) member."""
        self.seen = crc if not self.done else _CRC_MATH["crc32"].combine(self.seen, crc, length)
        self.done += length

    def inflate(self, data: memoryview) -> None:
        """The next stored bytes of this (DEFLATED) member, in order."""
        if not self.bad:
            try:
                chunk = self.inflater.decompress(data, CHECKSUM_CHUNK)
                while True:
                    self.seen = zlib.crc32(chunk, self.seen)
                    self.out += len(chunk)
                    if self.out > self.size:
                        self.bad = "inflates to more than its recorded size"
                        break
                    if not self.inflater.unconsumed_tail:
                        break
                    chunk = self.inflater.decompress(self.inflater.unconsumed_tail, CHECKSUM_CHUNK)
            except zlib.error:
                self.bad = "does not inflate"
        self.done += len(data)

    def verdict(self) -> bool:
        """True when the member's data matched its recorded CRC32 (and size)."""
        if self.bad:
            return False
        if self.inflater is not None:
            try:
                tail = self.inflater.flush()
            except zlib.error:
                return False
            self.seen = zlib.crc32(tail, self.seen)
            self.out += len(tail)
            if not self.inflater.eof or self.out != self.size:
                return False
        elif self.done != self.end - self.start:
            return False
        return self.seen == self.crc


_ZIP_STORED = 0
_ZIP_DEFLATED = 8


def zip_members(f: BinaryIO, size: int) -> list[ZipMember] | None:
    """The members of the zip in ``f`` whose CRC32 can be checked (STORED and DEFLATED, not encrypted),
    from its central directory (ZIP64 aware) and local headers; None when the directory cannot be read.

    A member whose local header is broken, whose data lies past the end of the file or over another
    member's, or whose STORED sizes differ, is returned already marked bad.
    """
    end = _zip_end_record(f, size)
    if end is None:
        return None
    count, cd_size, cd_offset = end
    if cd_size > ZIP_DIRECTORY_MAX_BYTES or cd_offset + cd_size > size:
        return None
    directory = read_at(f, cd_offset, cd_size)
    if len(directory) != cd_size:
        return None
    members: list[ZipMember] = []
    pos = 0
    for _ in range(count):
        if directory[pos : pos + 4] != b"PK\x01\x02" or pos + 46 > cd_size:
            return None
        flags, method, _t, _d, crc, csize, usize, n, e, c = struct.unpack_from("<HHHHIIIHHH", directory, pos + 8)
        (offset,) = struct.unpack_from("<I", directory, pos + 42)
        name = directory[pos + 46 : pos + 46 + n].decode("utf-8", "replace")
        extra = directory[pos + 46 + n : pos + 46 + n + e]
        pos += 46 + n + e + c
        if pos > cd_size:
            return None
        usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        if flags & 1 or method not in (_ZIP_STORED, _ZIP_DEFLATED):
            continue  # encrypted, or compressed in a way the standard library cannot check in one pass
        header = read_at(f, offset, 30) if offset + 30 <= size else b""
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            member = ZipMember(name, 0, 0, method, crc, usize)
            member.bad = "its local header is missing"
            members.append(member)
            continue
        local_n, local_e = struct.unpack_from("<HH", header, 26)
        start = offset + 30 + local_n + local_e
        member = ZipMember(name, start, start + csize, method, crc, usize)
        (local_crc,) = struct.unpack_from("<I", header, 14)
        if start + csize > size:
            member.bad = "its data runs past the end of the file"
        elif method == _ZIP_STORED and csize != usize:
            member.bad = "its stored and recorded sizes differ"
        elif not flags & 8 and local_crc != crc:
            member.bad = "its local and central CRC32 differ"
        members.append(member)
    members.sort(key=lambda m: (m.start, m.end))
    reach = 0
    for member in members:
        if member.bad:
            continue
        if member.start < reach:
            member.bad = "its data overlaps another member's"
        reach = max(reach, member.end)
    return members


def _zip_end_record(f: BinaryIO, size: int) -> tuple[int, int, int] | None:
    """(entries, central directory size, its offset) from the end records, as zip_complete finds them."""
    for tail, _base, pos in zip_end_candidates(f, size):
        count, cd_size, cd_offset = struct.unpack("<HII", tail[pos + 10 : pos + 20])
        if count != 0xFFFF and cd_size != 0xFFFFFFFF and cd_offset != 0xFFFFFFFF:
            return count, cd_size, cd_offset
        if pos >= 20 and tail[pos - 20 : pos - 16] == b"PK\x06\x07":
            (where,) = struct.unpack("<Q", tail[pos - 12 : pos - 4])
            record64 = read_at(f, where, 56) if where + 56 <= size else b""
            if len(record64) == 56 and record64[:4] == b"PK\x06\x06":
                count64, cd_size64, cd_offset64 = struct.unpack("<QQQ", record64[32:56])
                return count64, cd_size64, cd_offset64
        return None
    return None


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The real sizes and offset of a central directory entry whose 32-bit fields overflowed (ZIP64)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            values = iter(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if usize == 0xFFFFFFFF:
                usize = next(values, usize)
            if csize == 0xFFFFFFFF:
                csize = next(values, csize)
            if offset == 0xFFFFFFFF:
                offset = next(values, offset)
            break
        pos += 4 + length
    return usize, csize, offset


class CrcPass:
    """The CRCs of one file, computed a buffer at a time by ``compute`` (on either thread, in any order)
    and put together in file order by ``assemble`` (on the reading thread).

    ``compute`` cuts a buffer at block boundaries and at the boundaries of zip members' data, and
    CRCs each piece once from scratch; ``assemble`` joins the pieces into block CRCs and member CRCs
    with ``crc_combine`` (a few microseconds a piece). So each byte is CRC'd once, members included,
    and whichever thread is free can take the next buffer. Inflating a DEFLATED member needs its
    bytes in order: a file with one is computed on the reading thread only (``ordered``).
    """

    def __init__(self, size: int, members: list[ZipMember] | None) -> None:
        self.block = crc_block_size(size)
        self.all_members = members
        self.members = [m for m in members if not m.bad and m.end > m.start] if members else []
        self.starts = [m.start for m in self.members]
        self.ordered = any(m.inflater is not None for m in self.members)
        self.blocks32: list[int] = []
        self.blocks32c: list[int] = []
        self.cur32 = self.cur32c = self.crc64 = 0
        self.filled = 0  # bytes of the current block assembled so far
        self.offset = 0  # bytes assembled so far

    def compute(self, view: memoryview, offset: int) -> tuple[int, int, list[tuple[int, int, int, Any]]]:
        """(length, CRC64 of the buffer, pieces) for the ``view`` read at ``offset``: each piece
        (length, CRC32, CRC32C, member or None) lies within one block and at most one member."""
        crc64 = _crt.crc64nvme(view) if _crt is not None else 0
        pieces = []
        n, block, members = len(view), self.block, self.members
        pos = 0
        while pos < n:
            at = offset + pos
            stop = min(offset + n, (at // block + 1) * block)
            member = None
            if members:
                i = bisect.bisect_right(self.starts, at) - 1
                if i >= 0 and members[i].end > at:
                    member = members[i]
                    stop = min(stop, member.end)
                elif i + 1 < len(members):
                    stop = min(stop, members[i + 1].start)
            piece = view[pos : stop - offset]
            if member is not None and member.inflater is not None:
                member.inflate(piece)  # only when ordered: on the reading thread, in file order
            pieces.append((stop - at, zlib.crc32(piece), _crt.crc32c(piece) if _crt is not None else 0, member))
            pos = stop - offset
        return n, crc64, pieces

    def assemble(self, computed: tuple[int, int, list[tuple[int, int, int, Any]]]) -> None:
        """Join the next buffer's CRCs (from ``compute``), in file order."""
        n, crc64, pieces = computed
        if _crt is not None:
            self.crc64 = _CRC_MATH["crc64nvme"].combine(self.crc64, crc64, n) if self.offset else crc64
        math32, math32c = _CRC_MATH["crc32"], _CRC_MATH["crc32c"]
        for length, crc32, crc32c, member in pieces:
            if self.filled:
                self.cur32 = math32.combine(self.cur32, crc32, length)
                if _crt is not None:
                    self.cur32c = math32c.combine(self.cur32c, crc32c, length)
            else:
                self.cur32, self.cur32c = crc32, crc32c
            if member is not None and member.inflater is None:
                member.add(crc32, length)
            self.filled += length
            if self.filled == self.block:
                self._end_block()
        self.offset += n

    def _end_block(self) -> None:
        self.blocks32.append(self.cur32)
        self.blocks32c.append(self.cur32c)
        self.cur32 = self.cur32c = 0
        self.filled = 0

    def result(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The wire ``checksums`` object, and the members' verdict ({"checked", "bad"}) when checked."""
        if self.filled:
            self._end_block()
        size = self.offset  # what was read: a file that grew or shrank meanwhile is dropped by the caller
        math32 = _CRC_MATH["crc32"]
        full32 = full32c = 0
        for i, c32 in enumerate(self.blocks32):
            length = min(self.block, size - i * self.block)
            full32 = c32 if not i else math32.combine(full32, c32, length)
            if _crt is not None:
                c32c = self.blocks32c[i]
                full32c = c32c if not i else _CRC_MATH["crc32c"].combine(full32c, c32c, length)
        out: dict[str, Any] = {"crc32": _crc_hex("crc32", full32)}
        if _crt is not None:
            out["crc32c"] = _crc_hex("crc32c", full32c)
            out["crc64nvme"] = _crc_hex("crc64nvme", self.crc64)
        if size > self.block:
            pack = struct.Struct(f">{len(self.blocks32)}I").pack
            blocks = {"size": self.block, "crc32": base64.b64encode(pack(*self.blocks32)).decode("ascii")}
            if _crt is not None:
                blocks["crc32c"] = base64.b64encode(pack(*self.blocks32c)).decode("ascii")
            out["blocks"] = blocks
        verdict = None
        if self.all_members is not None:
            bad = [m.name for m in self.all_members if not m.verdict()]
            verdict = {"checked": len(self.all_members), "bad": bad[:MEMBERS_BAD_MAX]}
        return out, verdict


def checksums_note() -> str:
    """The one line a run with --checksums prints on stderr: which algorithms it computes."""
    note = f"checksums: sha256, {', '.join(CRC_ALGORITHMS)}"
    if _crt is None:
        note += " (crc32c and crc64nvme need the optional module awscrt: pip install awscrt)"
    return note
