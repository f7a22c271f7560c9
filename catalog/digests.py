"""Every checksum a store or the agent keeps for one file, and how two files' checksums are compared.

A file's main checksum is ``ShardFile.checksum``/``checksum_algo`` (the agent's sha256, or the one
checksum S3 stored). ``ShardFile.digests`` holds every other one, as a dict:

- ``crc32``, ``crc32c``, ``crc64nvme``, ``sha1``, ``sha256``, ``md5``: full-object digests, lowercase
  hex, big-endian (S3 sends them base64; ``md5`` only where it is a true content MD5: the ETag of a
  single-part upload that was not encrypted with KMS or a customer key);
- ``blocks``: ``{"size": B, "crc32": base64, "crc32c": base64}``: the CRC of every ``B``-byte block
  of the file (the last one shorter), which combine into the CRC of any part layout whose
  boundaries fall on block boundaries (the agent's ``--checksums``; docs/wire-format.md);
- ``composite``: ``{"algo": "crc32", "value": hex, "parts": N, "part_size": P}``: an S3 multipart
  object's checksum of its parts' checksums (the checksum of the concatenated big-endian part
  checksums, AWS "Checking object integrity"), with its part count and the size of its first part
  (0: unknown); every part but the last has that size, as boto3, the aws CLI, s5cmd and rclone
  upload;
- ``at``: when the checksums were last read (seconds since the epoch): the agent's hashing time, or
  for an object, the HEAD that read them; ``taken`` (objects only): when the store computed them,
  the object's LastModified (its upload). Which copy was written first is judged by ``taken``, else
  ``at``; how fresh a verdict is, by ``at``.

``compare`` says whether two files are equal by the strongest means both sides allow, or why they
cannot be compared, in words a person can act on.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any

from awscrt import checksums as _crt

from fleet.agent import crc_of_blocks

# Full-object digests, strongest first, and the length of their hex form.
FULL_ALGOS: dict[str, int] = {
    "sha256": 64,
    "sha1": 40,
    "crc64nvme": 16,
    "crc32c": 8,
    "crc32": 8,
    "md5": 32,
}
# CRCs that combine (width in bytes): the only ones a multipart layout can be rebuilt for from blocks.
CRC_WIDTH = {"crc32": 4, "crc32c": 4, "crc64nvme": 8}
MIB = 1 << 20
# What a line may send: a block CRC list longer than this (10,000 blocks) is refused.
MAX_BLOCKS = 10_000
WIRE_KEYS = frozenset({"crc32", "crc32c", "crc64nvme", "sha1", "md5"})


def crc(algo: str, data: bytes) -> int:
    if algo == "crc32":
        return zlib.crc32(data)
    if algo == "crc32c":
        return _crt.crc32c(data)
    return _crt.crc64nvme(data)


def dumps(digests: dict[str, Any] | None) -> str | None:
    """The canonical JSON text stored for some digests (keys sorted, no spaces), or None."""
    if not digests:
        return None
    return json.dumps(digests, sort_keys=True, separators=(",", ":"))


def loads(value: Any) -> dict[str, Any]:
    """Stored digests (JSON text, a dict or None) as a dict."""
    if not value:
        return {}
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _hex(value: Any, length: int, name: str) -> str:
    if not isinstance(value, str) or len(value) != length or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"checksums.{name} must be {length} lowercase hex digits")
    return value


def from_line(checksums: Any, checksummed_at: Any, size: int) -> dict[str, Any] | None:
    """The stored digests of an inventory line's ``checksums`` object and ``checksummed_at``; raises
    ValueError naming what is wrong (the whole inventory then fails: bad input changes nothing)."""
    if checksums is None and checksummed_at is None:
        return None
    out: dict[str, Any] = {}
    if checksums is not None:
        if not isinstance(checksums, dict):
            raise ValueError("checksums must be an object")
        for name, value in checksums.items():
            if name == "blocks":
                out["blocks"] = _blocks(value, size)
            elif name in WIRE_KEYS:
                out[name] = _hex(value, FULL_ALGOS[name], name)
            else:
                raise ValueError(f"checksums has an unknown key {name!r}")
    if checksummed_at is not None:
        if isinstance(checksummed_at, bool) or not isinstance(checksummed_at, (int, float)):
            raise ValueError("checksummed_at must be a number of seconds since the epoch")
        if not 0 <= checksummed_at < 253402300799:
            raise ValueError("checksummed_at is out of range")
        out["at"] = round(float(checksummed_at), 3)
    return out or None


def _blocks(value: Any, size: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("checksums.blocks must be an object")
    block = value.get("size")
    if isinstance(block, bool) or not isinstance(block, int) or block < MIB or block % MIB or block & (block - 1):
        raise ValueError("checksums.blocks.size must be a power-of-two number of MiB")
    count = -(-size // block)
    if count > MAX_BLOCKS:
        raise ValueError(f"checksums.blocks has more than {MAX_BLOCKS:,} blocks")
    out: dict[str, Any] = {"size": block}
    for name, encoded in value.items():
        if name == "size":
            continue
        if name not in ("crc32", "crc32c"):
            raise ValueError(f"checksums.blocks has an unknown key {name!r}")
        try:
            raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            raw = None
        if raw is None or len(raw) != count * CRC_WIDTH[name]:
            raise ValueError(f"checksums.blocks.{name} must be base64 of {count} big-endian {name} values")
        out[name] = encoded
    return out


def block_crcs(digests: dict[str, Any], algo: str) -> tuple[int, list[int]] | None:
    """(block size, the CRC of each block) for ``algo``, or None."""
    blocks = digests.get("blocks")
    if not isinstance(blocks, dict) or not isinstance(blocks.get(algo), str):
        return None
    width = CRC_WIDTH[algo]
    raw = base64.b64decode(blocks[algo])
    return blocks["size"], [int.from_bytes(raw[i : i + width], "big") for i in range(0, len(raw), width)]


def composite_of(algo: str, blocks: tuple[int, list[int]], size: int, part_size: int) -> str | None:
    """The S3 composite checksum (hex, without ``-N``) of a file of ``size`` bytes uploaded in parts of
    ``part_size``, rebuilt from its block CRCs; None when the parts do not fall on block boundaries.
    The part CRCs are combined by the agent's own ``crc_of_blocks``: the wire contract's one definition."""
    block, crcs = blocks
    try:
        parts = crc_of_blocks(algo, crcs, block, size, part_size)
    except ValueError:
        return None
    width = CRC_WIDTH[algo]
    return crc(algo, b"".join(p.to_bytes(width, "big") for p in parts)).to_bytes(width, "big").hex()


def full_from_blocks(algo: str, blocks: tuple[int, list[int]], size: int) -> str | None:
    """The CRC of the whole file, combined from its block CRCs (one part as long as the file)."""
    block, crcs = blocks
    try:
        (whole,) = crc_of_blocks(algo, crcs, block, size, len(crcs) * block)
    except ValueError:
        return None
    return whole.to_bytes(CRC_WIDTH[algo], "big").hex()


# --- comparing two files -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Comparison:
    """How two files compared: ``equal`` by ``algo`` (e.g. "crc32", "crc32 composite of 3 parts")."""

    algo: str
    equal: bool


def full_digests(algo: str, digest: str, digests: dict[str, Any]) -> dict[str, str]:
    """{algorithm: hex} of every full-object digest of a file: its main checksum and the others."""
    out = {k: v for k, v in digests.items() if k in FULL_ALGOS and isinstance(v, str)}
    if algo in FULL_ALGOS and digest and len(digest) == FULL_ALGOS[algo]:
        out[algo] = digest
    return out


def compare(
    mine: dict[str, str], my_digests: dict[str, Any], theirs: dict[str, str], their_digests: dict[str, Any], size: int
) -> Comparison | None:
    """Compare two files of ``size`` bytes (their full digests and stored digests); None: not comparable."""
    for algo in FULL_ALGOS:
        if algo in mine and algo in theirs:
            return Comparison(algo, mine[algo] == theirs[algo])
    for a, a_digests, b_digests in ((mine, my_digests, their_digests), (theirs, their_digests, my_digests)):
        composite = b_digests.get("composite")
        if not isinstance(composite, dict):
            continue
        result = _against_composite(a, a_digests, composite, size)
        if result is not None:
            return result
    # Both composites of one algorithm and one layout: the same parts give the same value.
    ca, cb = my_digests.get("composite"), their_digests.get("composite")
    if isinstance(ca, dict) and isinstance(cb, dict) and _same_layout(ca, cb):
        return Comparison(_composite_label(ca), ca.get("value") == cb.get("value"))
    # A full CRC rebuilt from one side's blocks against the other's full CRC.
    for algo in CRC_WIDTH:
        for a_digests, b in ((my_digests, theirs), (their_digests, mine)):
            if algo in b and (blocks := block_crcs(a_digests, algo)) is not None:
                whole = full_from_blocks(algo, blocks, size)
                if whole is not None:
                    return Comparison(algo, whole == b[algo])
    return None


def _same_layout(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a.get("algo") == b.get("algo") and a.get("parts") == b.get("parts") and a.get("part_size") == b.get("part_size")
    )


def _composite_label(composite: dict[str, Any]) -> str:
    return f"{composite.get('algo')} composite of {composite.get('parts')} parts"


def _against_composite(
    full: dict[str, str], digests: dict[str, Any], composite: dict[str, Any], size: int
) -> Comparison | None:
    algo = composite.get("algo")
    parts = composite.get("parts")
    if algo not in CRC_WIDTH or not isinstance(parts, int) or parts < 1:
        return None
    blocks = block_crcs(digests, algo)
    if blocks is None:
        return None
    value = composite.get("value")
    part_size = composite.get("part_size") or 0
    if part_size:
        candidates = [part_size]
    else:
        # The part size unknown: every size on block boundaries that gives this many parts (uniform parts).
        block = blocks[0]
        low = -(-size // parts)
        high = size if parts == 1 else -(-size // (parts - 1)) - 1
        first = -(-low // block) * block
        candidates = list(range(first, high + 1, block))[:64]
    for p in candidates:
        if -(-size // p) != parts:
            continue
        rebuilt = composite_of(algo, blocks, size, p)
        if rebuilt is None:
            continue
        if rebuilt == value:
            return Comparison(_composite_label(composite), True)
        if part_size:
            return Comparison(_composite_label(composite), False)
    return None


def why_not_comparable(mine: dict[str, str], my_digests: dict[str, Any], their: dict[str, Any]) -> str:
    """A reason a person can act on, for a file whose checksums match nothing another copy has."""
    composite = their.get("composite")
    if isinstance(composite, dict):
        algo = composite.get("algo")
        if algo not in CRC_WIDTH:
            return (
                f"the other copy has only a {algo} composite (a checksum of part checksums), which cannot be rebuilt "
                "from a whole file: upload with a CRC checksum (boto3's default CRC32, or CRC64NVME)"
            )
        if block_crcs(my_digests, algo) is None:
            return (
                f"the other copy has a {algo} composite; this one has no {algo} block checksums to rebuild it "
                "(run the agent with --checksums" + (" and awscrt installed" if algo != "crc32" else "") + ")"
            )
        return f"the other copy's {algo} composite has parts that do not fall on this copy's block boundaries"
    return ""
