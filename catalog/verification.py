"""Verification of checkpoint copies: do their files' content checksums agree with a reference?

A copy is **verified** when it is complete and every member file has a content checksum that agrees
with at least one reference; **mismatch** when a comparable checksum disagrees (the copy is then also
made corrupt, with a reason naming the file and what it disagrees with); **unverified** otherwise,
with reasons that say what is missing.

Files are compared per path relative to the copy directory (for a single-file copy, relative to the
directory holding it, i.e. its name), so copies at different roots and prefixes line up.

References, strongest first, for one file of copy C:

1. C's own writer's manifest (``CheckpointCopy.reference_checksums``: a ``ckptfleet.json`` sidecar,
   Megatron's ``integrity.json``): agreeing verifies the file, disagreeing is a mismatch.
2. Otherwise the manifests recorded with the checkpoint's other copies: agreeing with any verifies,
   disagreeing with all is a mismatch.
3. Otherwise the actual checksums of the other copies' files. Only complete, non-temporary copies
   speak as peers (a half-written file accuses nobody). The file is verified when all peers agree with
   it. Where they disagree (``_settle``), in order: the copy it was made from, where the product recorded
   that (``CheckpointCopy.made_from``: a move, an offload, a promotion) and that copy's checksum was taken
   before; the format's own checks; a strict majority of three or more copies; otherwise the copies are
   disputed. When one copy was written after another's checksum was taken says nothing about where it
   came from, so it decides nothing.

When two copies each agree with their own manifest but differ from each other, they are two
different saves of one step: both are flagged (verification mismatch, with a reason) but neither is
made corrupt, as each is what its writer wrote. The same holds for sizes: complete copies whose
file of one path has different sizes each satisfy their own manifest (or they would not be
complete), so they are flagged, not made corrupt; a copy whose sizes disagree with its own manifest
is already corrupt by its format.

Only like is compared with like. Comparable are content digests of one algorithm on both sides:
sha256 (the agent's ``--checksums``; S3's full-object ChecksumSHA256, converted to hex), sha1,
sha512, md5 (only where something records a true content MD5 under that name; an S3 ETag is kept in
``ShardFile.etag`` and never used), and the full-object CRCs (crc32, crc32c, crc64nvme) against the
same CRC. Never comparable: a multipart ETag (``…-N``), a composite checksum (``sha256-composite``,
the checksum of part checksums), an unknown algorithm, a CRC against a sha256.

``judge`` is the pure core; ``checkpoints_verify`` loads copies and files and writes the verdicts.
Both are deterministic, and ``checkpoints_verify`` writes nothing when nothing changed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from catalog.choices import CopyState, Verification, VerificationBasis
from catalog.digests import Comparison, compare, full_digests, why_not_comparable
from catalog.digests import loads as digests_loads
from catalog.hooks import copies_restated
from catalog.layout import PathTemplate, group_files, sqlite_epoch
from catalog.models import CheckpointCopy, ShardFile
from catalog.recognition import recognize

# Content digests and the length of their hex form.
DIGEST_HEX_LENGTH: dict[str, int] = {
    "sha256": 64,
    "sha512": 128,
    "sha1": 40,
    "md5": 32,
    "crc32": 8,
    "crc32c": 8,
    "crc64nvme": 16,
}
# Files that are the writer's manifest themselves: a manifest never lists its own checksum.
MANIFEST_FILES = frozenset({"ckptfleet.json", "integrity.json"})
# Checkpoints per batch are chosen so that one batch loads about this many member files (bounded memory).
FILES_PER_BATCH = 20_000
_HEX = re.compile(r"^[0-9a-f]+$")
_HEX_DIGITS = "0123456789abcdef"


# --- checksums ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checksum:
    """A checksum as recorded. ``digest`` is lowercase hex when ``content`` is true."""

    algo: str
    digest: str = ""
    content: bool = False  # a digest of the whole content, comparable with the same algorithm
    label: str = ""  # what it is, in words, when it is not a content digest

    @property
    def key(self) -> tuple[str, str]:
        return (self.algo, self.digest)

    @property
    def name(self) -> str:
        """Short words for reasons: the algorithm, or what the value is when it is not a digest."""
        if self.content or self.algo.endswith("-composite"):
            return self.algo
        return "multipart ETag" if "ETag" in self.label else self.label.removeprefix("a ")


def canonical_algo(algo: str) -> str:
    """``SHA-256`` → ``sha256``, ``CRC64NVME`` → ``crc64nvme``; a composite keeps its ``-composite``."""
    name = (algo or "").strip().lower()
    composite = name.endswith(("-composite", "_composite"))
    if composite:
        name = name[: -len("-composite")]
    name = name.replace("-", "").replace("_", "")
    return f"{name}-composite" if composite else name


def checksum(algo: str | None, digest: str | None) -> Checksum | None:
    """A recorded checksum, classified; None when there is none."""
    if not digest or not algo:
        return None
    name = canonical_algo(algo)
    value = digest.strip()
    if name.endswith("-composite"):
        return Checksum(name, value, label=f"a composite checksum ({name}, a checksum of part checksums)")
    if name not in DIGEST_HEX_LENGTH:
        return Checksum(name, value, label=f"a checksum of unknown algorithm {name!r}")
    if name == "md5" and "-" in value.strip('"'):
        return Checksum(name, value, label="a multipart ETag (not an MD5 of the content)")
    hexdigest = _as_hex(value.strip('"'), DIGEST_HEX_LENGTH[name])
    if hexdigest is None:
        return Checksum(name, value, label=f"a malformed {name} value")
    return Checksum(name, hexdigest, content=True)


def _as_hex(value: str, hex_length: int) -> str | None:
    """Lowercase hex from hex or base64 (as S3 reports checksums), or None when it is neither."""
    lowered = value.lower()
    if len(lowered) == hex_length and _HEX.match(lowered):
        return lowered
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) * 2 == hex_length else None


def relative_path(member: str, copy_path: str) -> str:
    """A member file's path relative to its copy directory (a single file: relative to its directory)."""
    if member.startswith(copy_path + "/"):
        return member[len(copy_path) + 1 :]
    parent = copy_path.rpartition("/")[0]
    if parent and member.startswith(parent + "/"):
        return member[len(parent) + 1 :]
    return member


def relative_checksums(copy_path: str, references: Mapping[str, tuple[str, str]]) -> dict[str, list[str]]:
    """``Found.reference_checksums`` (paths below the root) as stored on the copy: {relative: [algo, hex]}."""
    return {
        relative_path(path, copy_path): [str(algo), str(digest)] for path, (algo, digest) in sorted(references.items())
    }


# --- the pure core --------------------------------------------------------------------------------


@dataclass(slots=True)
class FileFacts:
    """One member file as verification sees it. Read-only by convention: an ingest builds one per file,
    and a frozen dataclass is built five times slower.

    ``digests`` are its other checksums (``catalog.digests``, stored text or a dict), ``mtime`` when it
    was written (seconds since the epoch), ``facts`` what the agent read from it (a torch zip's member
    CRC check); all three only matter where copies are compared.
    """

    size: int
    algo: str = ""
    digest: str = ""
    digests: Any = None
    mtime: float = 0.0
    facts: Any = None
    first: Any = None  # ShardFile.first_checksum: {"algo", "digest", "at"} when its content changed under it
    parsed: Any = None  # ``digests`` decoded, once

    @property
    def has_checksum(self) -> bool:
        return bool((self.digest and self.algo) or self.digests)

    def other(self) -> dict[str, Any]:
        if self.parsed is None:
            self.parsed = digests_loads(self.digests)
        return self.parsed

    def full(self) -> dict[str, str]:
        return full_digests(self.algo, self.digest, self.other())

    def taken_at(self) -> float | None:
        """When its checksums were taken: the store's write for an object, else the agent's hashing."""
        other = self.other()
        at = other.get("taken", other.get("at"))
        return float(at) if isinstance(at, (int, float)) else None

    def first_checksum(self) -> dict[str, Any]:
        return digests_loads(self.first)

    def zip_intact(self) -> bool | None:
        """True when the agent read the whole torch zip and every member's CRC32 held; False when one did not."""
        facts = self.facts
        if isinstance(facts, str):
            try:
                facts = json.loads(facts)
            except ValueError:
                return None
        if not isinstance(facts, dict) or facts.get("kind") != "torch_file" or "members_bad" not in facts:
            return None
        bad = facts.get("members_bad")
        return (not bad) and bool(facts.get("members_checked"))


@dataclass(frozen=True)
class CopyEvidence:
    """One present copy of a checkpoint: where it is, what its formats judged, its files and manifest.

    ``state`` is the formats' verdict, before verification adds to it. ``where`` names the copy in
    reasons ("the copy at gpu-b01:/mnt/nvme0/checkpoints").
    """

    id: int
    where: str
    state: str = CopyState.COMPLETE
    temporary: bool = False
    manifest: Mapping[str, Sequence[str]] = field(default_factory=dict)
    files: Mapping[str, FileFacts] = field(default_factory=dict)
    # Recorded provenance (``CheckpointCopy.made_from``): the copy the product wrote this one from, when it began
    # (seconds since the epoch) and what wrote it. None where nothing recorded it: then no copy is its source.
    made_from: int | None = None
    made_at: float | None = None
    made_by: str = ""

    @property
    def speaks(self) -> bool:
        """Whether this copy's own files may serve as a reference for the others."""
        return self.state == CopyState.COMPLETE and not self.temporary


@dataclass
class Verdict:
    """What verification says of one copy.

    ``reasons`` become ``verification_reasons``; ``corrupt`` are the reasons that make the copy
    corrupt, to be added to its state reasons (empty unless ``verification`` is mismatch).
    """

    verification: str
    reasons: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    basis: str = VerificationBasis.NONE


@dataclass
class _FileResult:
    agree: set[str] = field(default_factory=set)  # names of the references it agrees with
    corrupt: str = ""  # a disagreement that makes the copy corrupt
    flag: str = ""  # a disagreement that does not (two self-consistent saves)
    own_manifest_mismatch: bool = False
    no_checksum: str = ""  # "" or the label of the non-content checksum it has
    incomparable: tuple[str, str] | None = None  # (its algorithm, the references' algorithms)
    no_reference: bool = False
    dispute: str = ""  # copies disagree and nothing independent says which is right
    miscopied: tuple[str, ...] = ()  # copies made from this one after its checksum was taken, which differ
    basis: str = ""  # what decided ``agree`` or ``corrupt`` (VerificationBasis)


# The result of every file without a checksum (shared, so never changed in place).
_UNCHECKED = _FileResult(no_checksum="none")


def _names(wheres: Iterable[str], limit: int = 3) -> str:
    items = sorted(set(wheres))
    shown = items[:limit]
    text = ", ".join(shown[:-1]) + (" and " if len(shown) > 1 else "") + shown[-1]
    if len(items) > limit:
        text = ", ".join(shown) + f" and {len(items) - limit} more"
    return text


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _of(n: int, total: int, verb: str = "have") -> str:
    """ "1 of 3 files has", "2 of 3 files have"."""
    return f"{n:,} of {_plural(total, 'file')} {('has' if verb == 'have' else verb + 's') if n == 1 else verb}"


def judge(copies: Sequence[CopyEvidence]) -> dict[int, Verdict]:
    """The verdict on every copy of one checkpoint, from its files, its manifest and its peers'."""
    manifests = {c.id: {rel: checksum(*_pair(v)) for rel, v in c.manifest.items()} for c in copies}
    # Files without a checksum have none to compare (checksum() is None for them): only the others are kept.
    actual = {c.id: _Actual(c.files) for c in copies}
    sizes = {c.id: {rel: f.size for rel, f in c.files.items()} for c in copies}
    settled = _plain_agreement(copies)
    lineage = _lineage(copies)
    verdicts: dict[int, Verdict] = {}
    for c in copies:
        results: dict[str, _FileResult] = {}
        plain = settled[c.id]
        # A file without a checksum has the same result whatever the references (see _judge_file):
        # one shared result stands for all of them (_judge_sizes replaces it where sizes differ).
        for rel in sorted(c.files):
            facts = c.files[rel]
            if not facts.has_checksum:
                results[rel] = _UNCHECKED
            elif rel in plain:
                results[rel] = plain[rel]
            else:
                results[rel] = _judge_file(c, rel, copies, manifests, actual, lineage)
        _judge_sizes(c, copies, results, sizes)
        alone = not any(d.id != c.id and not d.temporary for d in copies)
        verdicts[c.id] = _verdict(c, results, alone=alone)
    return verdicts


def _lineage(copies: Sequence[CopyEvidence]) -> dict[int, dict[int, float]]:
    """{copy id: {ancestor id: when the copy made from that ancestor was made}} by recorded provenance only, among
    these copies: a copy made from a copy made from S descends from S, as of the first copy made from S."""
    by_id = {c.id: c for c in copies}
    out: dict[int, dict[int, float]] = {}
    for c in copies:
        ancestors: dict[int, float] = {}
        child = c
        while child.made_from is not None and child.made_from in by_id and child.made_from not in ancestors:
            if child.made_from == c.id:
                break  # a loop in what was recorded: no copy is its own source
            ancestors[child.made_from] = child.made_at if child.made_at is not None else _newest_mtime(child)
            child = by_id[child.made_from]
        out[c.id] = ancestors
    return out


def _newest_mtime(c: CopyEvidence) -> float:
    return max((f.mtime for f in c.files.values()), default=0.0)


class _Actual(dict):
    """{relative path: Checksum} of a copy's main checksums, classified only when asked for."""

    def __init__(self, files: Mapping[str, FileFacts]) -> None:
        super().__init__()
        self.files = files

    def get(self, rel: str, default: Any = None) -> Any:
        if rel in self:
            return self[rel]
        facts = self.files.get(rel)
        value = checksum(facts.algo, facts.digest) if facts is not None and facts.digest and facts.algo else None
        self[rel] = value
        return value if value is not None else default


def _plain_agreement(copies: Sequence[CopyEvidence]) -> dict[int, dict[str, _FileResult]]:
    """The results ``_judge_file`` would give, found for many files at once: {copy id: {path: result}}.

    Most files of most checkpoints are plain: no manifest records them and no first checksum is kept
    for them, and either no other copy has them with a checksum (nothing to compare) or every copy that
    does has the same main checksum (the same algorithm and digest). Such files are found as set
    intersections of the copies' {path: checksum} items and share one result per set of agreeing
    copies, the way files without a checksum share one; every other file goes through ``_judge_file``.
    """
    manifested = set().union(*(c.manifest.keys() for c in copies))
    first = {rel for c in copies for rel, f in c.files.items() if f.first}
    keys = {c.id: {(rel, f.algo, f.digest) for rel, f in c.files.items() if _is_content(f)} for c in copies}
    checked = {c.id: {rel for rel, f in c.files.items() if f.has_checksum} for c in copies}
    out: dict[int, dict[str, _FileResult]] = {}
    for c in copies:
        plain: dict[str, _FileResult] = {}
        out[c.id] = plain
        mine = {rel for rel, _, _ in keys[c.id]} - manifested - first
        if not mine:
            continue
        others = [d for d in copies if d.id != c.id and not d.temporary]
        if not others:
            # Nothing to compare with: a lone copy (the reasons then say so).
            shared = _FileResult(no_reference=True)
            plain.update(dict.fromkeys(mine, shared))
            continue
        unsettled: set[str] = set()
        agreeing: dict[str, list[str]] = {}
        for d in others:
            if not d.speaks:
                unsettled |= checked[d.id]  # a peer that does not speak: leave these files to _judge_file
                continue
            same = {rel for rel, _, _ in keys[c.id] & keys[d.id]}
            unsettled |= checked[d.id] - same
            for rel in same:
                agreeing.setdefault(rel, []).append(d.where)
        shared_by: dict[tuple[str, ...], _FileResult] = {}
        for rel in mine - unsettled:
            wheres = agreeing.get(rel)
            if not wheres:
                continue  # no peer has it: _judge_file says why (no reference, or not comparable)
            key = tuple(sorted(wheres))
            result = shared_by.get(key)
            if result is None:
                result = shared_by[key] = _FileResult(
                    agree={f"the copy at {where}" for where in key}, basis=VerificationBasis.PEERS
                )
            plain[rel] = result
    return out


def _is_content(facts: FileFacts) -> bool:
    """Whether a file's main checksum is a content digest in canonical form (what ``checksum`` calls content)."""
    length = DIGEST_HEX_LENGTH.get(facts.algo)
    return length is not None and len(facts.digest) == length and not facts.digest.strip(_HEX_DIGITS)


def _pair(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return str(value[0]), str(value[1])
    return None, None


def _judge_file(
    c: CopyEvidence,
    rel: str,
    copies: Sequence[CopyEvidence],
    manifests: dict[int, dict[str, Checksum | None]],
    actual: dict[int, dict[str, Checksum | None]],
    lineage: Mapping[int, Mapping[int, float]] | None = None,
) -> _FileResult:
    """One file of one copy, against what settles it, strongest first: its own first checksum, a checksum written
    at save time (a manifest), the first checksum another copy had before this one was written, then the other
    copies (where the copy it was recorded as made from comes first: ``_settle``)."""
    result = _FileResult()
    facts = c.files[rel]
    my_full = facts.full()
    others = [d for d in copies if d.id != c.id and not d.temporary]
    if not my_full and not facts.other():
        return _without_content_checksum(c, rel, others, manifests, actual, result)
    if (
        _against_own_first(rel, facts, my_full, result)
        or _against_manifests(c, rel, my_full, others, manifests, actual, result)
        or _against_sources_first(rel, facts, my_full, others, result)
    ):
        return result
    _against_peers(c, rel, facts, my_full, others, manifests, actual, result, lineage or {})
    return result


def _without_content_checksum(c, rel, others, manifests, actual, result: _FileResult) -> _FileResult:
    mine = actual[c.id].get(rel)
    result.no_checksum = mine.label if mine is not None else "none"
    # Something not a digest is only worth calling incomparable when a digest exists elsewhere.
    algos = _reference_algos(c, rel, others, manifests, actual, content=True) if mine is not None else set()
    if algos:
        result.incomparable = (mine.name, ", ".join(sorted(algos)))
    return result


def _against_own_first(rel: str, facts: FileFacts, my_full: dict[str, str], result: _FileResult) -> bool:
    """0. Its own first checksum: content that changed while the size and mtime did not is damaged."""
    first = facts.first_checksum()
    if first.get("algo") not in my_full or first.get("digest") == my_full[first["algo"]]:
        return False
    taken = first.get("at")
    when = f" at {datetime.fromtimestamp(taken, UTC):%Y-%m-%d %H:%M} UTC" if isinstance(taken, (int, float)) else ""
    result.corrupt = (
        f"{rel}: its {first['algo']} is not the one first taken{when}, though its size and mtime are the same "
        "(bit rot or an in-place write)"
    )
    result.basis = VerificationBasis.SOURCE
    return True


def _against_manifests(c, rel, my_full, others, manifests, actual, result: _FileResult) -> bool:
    """1. A checksum written at save time: the copy's own writer's manifest, then another copy's."""
    own = manifests[c.id].get(rel)
    if own is not None and own.content and own.algo in my_full:
        if own.digest == my_full[own.algo]:
            result.agree.add("the writer's manifest")
            result.basis = VerificationBasis.MANIFEST
            _two_saves(c, rel, own.algo, my_full[own.algo], others, manifests, actual, result)
        else:
            result.own_manifest_mismatch = True
            result.corrupt = f"{rel}: {own.algo} differs from the writer's manifest recorded with this copy"
            result.basis = VerificationBasis.MANIFEST
        return True
    recorded = {
        d.where: (m.algo, m.digest)
        for d in others
        if (m := manifests[d.id].get(rel)) is not None and m.content and m.algo in my_full
    }
    if not recorded:
        return False
    agreeing = {where for where, (algo, digest) in recorded.items() if digest == my_full[algo]}
    if agreeing:
        result.agree.update(f"the writer's manifest with the copy at {where}" for where in agreeing)
    else:
        algo = next(iter(recorded.values()))[0]
        result.corrupt = (
            f"{rel}: {algo} differs from the writer's manifest recorded with the copy at {_names(recorded)}"
        )
    result.basis = VerificationBasis.MANIFEST
    return True


def _against_sources_first(rel, facts: FileFacts, my_full, others, result: _FileResult) -> bool:
    """The first checksum of a copy whose content has changed since, taken before this copy was written: what that
    copy held when this one could have been made from it."""
    for d in others:
        theirs = d.files.get(rel)
        their_first = theirs.first_checksum() if theirs is not None else {}
        algo, taken = their_first.get("algo"), their_first.get("at")
        if algo in my_full and isinstance(taken, (int, float)) and facts.mtime and taken < facts.mtime:
            if their_first.get("digest") == my_full[algo]:
                result.agree.add(f"the checksum first taken of the copy at {d.where}")
                result.basis = VerificationBasis.SOURCE
                return True
    return False


def _against_peers(
    c, rel, facts: FileFacts, my_full, others, manifests, actual, result: _FileResult, lineage: Mapping
) -> None:
    """2. The other copies' own checksums, by the strongest algorithm both sides have."""
    peers = [d for d in others if d.speaks and rel in d.files and d.files[rel].has_checksum]
    compared: list[tuple[CopyEvidence, Comparison]] = []
    for d in peers:
        theirs = d.files[rel]
        outcome = compare(my_full, facts.other(), theirs.full(), theirs.other(), facts.size)
        if outcome is not None:
            compared.append((d, outcome))
    if not compared:
        hint = next((h for d in peers if (h := why_not_comparable(my_full, facts.other(), d.files[rel].other()))), "")
        algos = _reference_algos(c, rel, others, manifests, actual, content=False) | {
            a for d in peers for a in d.files[rel].full()
        }
        if hint:
            result.incomparable = ("", hint)
        elif algos:
            result.incomparable = (", ".join(sorted(my_full)) or "a composite", ", ".join(sorted(algos)))
        else:
            result.no_reference = True
        return
    agreeing = [(d, o) for d, o in compared if o.equal]
    differing = [(d, o) for d, o in compared if not o.equal]
    if not differing:
        result.agree.update(f"the copy at {d.where}" for d, _ in agreeing)
        result.basis = VerificationBasis.PEERS
        return
    _settle(c, rel, facts, agreeing, differing, result, lineage)


def _two_saves(c, rel, algo, digest, others, manifests, actual, result: _FileResult) -> None:
    """Two copies that each match their own manifest but differ: two different saves of one step."""
    for d in others:
        theirs, their_own = d.files.get(rel), manifests[d.id].get(rel)
        if not d.speaks or theirs is None or their_own is None or their_own.algo != algo:
            continue
        their_digest = theirs.full().get(algo)
        if their_digest is not None and their_digest == their_own.digest and their_digest != digest:
            result.flag = (
                f"{rel}: {algo} differs from the copy at {d.where}, though each matches its own "
                "writer's manifest (two different saves of this step?)"
            )


def _settle(
    c: CopyEvidence,
    rel: str,
    facts: FileFacts,
    agreeing: list[tuple[CopyEvidence, Comparison]],
    differing: list[tuple[CopyEvidence, Comparison]],
    result: _FileResult,
    lineage: Mapping[int, Mapping[int, float]] | None = None,
) -> None:
    """Copies disagree about one file: decide by what is independent of either side, or call it disputed.

    In order (PRODUCT.md, promise 10): the source's checksum taken before the copy was made, where the product
    recorded that it made this copy from that one (a copy cannot be more right than its source was when it was
    copied); the format's own checks (every member CRC32 of a torch zip, read by the agent); a strict majority of
    three or more copies. That one copy was written after another's checksum was taken proves nothing about where
    it came from: without recorded provenance no copy is another's source.
    """
    algo = differing[0][1].algo
    lineage = lineage or {}
    mine_taken = facts.taken_at()
    # Recorded provenance: a copy this one descends from, whose checksum was taken before the copy off it was made.
    ancestors = lineage.get(c.id, {})
    for d, outcome in differing:
        made = ancestors.get(d.id)
        their_taken = d.files[rel].taken_at()
        if made is not None and their_taken is not None and made and their_taken <= made:
            how = f" by {c.made_by}" if c.made_by and c.made_from == d.id else ""
            result.corrupt = (
                f"{rel}: {outcome.algo} differs from the copy at {d.where}, which this copy was made from{how}, "
                "whose checksum was taken before the copy was made (a copy cannot be more right than its source was)"
            )
            result.basis = VerificationBasis.SOURCE
            return
    # Copies recorded as made (directly or not) from this one after its checksum was taken do not accuse it.
    accusers = [
        (d, o)
        for d, o in differing
        if not (mine_taken is not None and (made := lineage.get(d.id, {}).get(c.id)) is not None and mine_taken <= made)
    ]
    if not accusers:
        result.miscopied = tuple(sorted(d.where for d, _ in differing))
        if agreeing:
            result.agree.update(f"the copy at {d.where}" for d, _ in agreeing)
            result.basis = VerificationBasis.PEERS
        return
    # The format's own checks: a torch zip whose every member CRC32 the agent confirmed.
    my_zip = facts.zip_intact()
    for d, outcome in accusers:
        if d.files[rel].zip_intact() and not my_zip:
            result.corrupt = (
                f"{rel}: {outcome.algo} differs from the copy at {d.where}, whose every zip member's CRC32 checks"
            )
            result.basis = VerificationBasis.FORMAT
            return
    if my_zip:
        accusers = [(d, o) for d, o in accusers if d.files[rel].zip_intact()]
        if not accusers:
            result.agree.add("its own zip member CRC32s")
            result.basis = VerificationBasis.FORMAT
            return
    # A strict majority of three or more copies.
    total = 1 + len(agreeing) + len(differing)
    if total >= 3:
        if (1 + len(agreeing)) * 2 > total:
            result.agree.update(f"the copy at {d.where}" for d, _ in agreeing)
            result.basis = VerificationBasis.MAJORITY
            return
        if _largest_group(rel, [d for d, _ in differing]) * 2 > total:
            result.corrupt = (
                f"{rel}: {algo} differs from the copies at {_names(d.where for d, _ in differing)}, "
                f"which agree with each other ({len(differing)} of {total} copies)"
            )
            result.basis = VerificationBasis.MAJORITY
            return
    result.dispute = (
        f"{rel}: {algo} differs from the copy at {_names(d.where for d, _ in accusers)}, and nothing independent "
        "says which is right"
    )


def _largest_group(rel: str, copies: list[CopyEvidence]) -> int:
    """The size of the largest set of these copies whose file ``rel`` is equal by pairwise comparison."""
    best = 0
    for i, a in enumerate(copies):
        fa = a.files[rel]
        size = 1
        for b in copies[i + 1 :]:
            fb = b.files[rel]
            outcome = compare(fa.full(), fa.other(), fb.full(), fb.other(), fa.size)
            if outcome is not None and outcome.equal:
                size += 1
        best = max(best, size)
    return best


def _reference_algos(
    c: CopyEvidence,
    rel: str,
    others: Sequence[CopyEvidence],
    manifests: dict[int, dict[str, Checksum | None]],
    actual: dict[int, dict[str, Checksum | None]],
    *,
    content: bool,
) -> set[str]:
    """The kinds of reference there are for a file (only content digests, if ``content``)."""
    refs = [manifests[c.id].get(rel)]
    for d in others:
        refs.append(manifests[d.id].get(rel))
        if d.speaks:
            refs.append(actual[d.id].get(rel))
    return {ref.name for ref in refs if ref is not None and (ref.content or not content)}


def _judge_sizes(
    c: CopyEvidence, copies: Sequence[CopyEvidence], results: dict[str, _FileResult], sizes: dict[int, dict[str, int]]
) -> None:
    """Flag files whose size differs between complete copies, where checksums did not settle it.

    ``sizes`` holds each copy's {relative path: size}; only the files some peer has at another size are
    looked at one by one (found as set differences of the size maps, not file by file in Python).
    """
    if not c.speaks:
        return
    peers = [d for d in copies if d.id != c.id and d.speaks]
    if not peers:
        return  # no other size to differ from
    mine = sizes[c.id]
    suspects: set[str] = set()
    for d in peers:
        theirs = sizes[d.id]
        suspects.update(rel for rel, _ in mine.items() - theirs.items() if rel in theirs)
    for rel in sorted(suspects):
        facts = c.files[rel]
        result = results[rel]
        if result.agree or result.corrupt or result.flag:
            continue
        sizes = {d.where: d.files[rel].size for d in peers if rel in d.files}
        differing = {where: size for where, size in sizes.items() if size != facts.size}
        if not differing:
            continue
        votes = Counter([facts.size, *sizes.values()]).most_common(2)
        if votes[0][0] == facts.size and votes[0][1] > votes[1][1]:
            continue  # most copies have this size: the others are the odd ones out
        words = ", ".join(f"{size:,} B at {where}" for where, size in sorted(differing.items()))
        # A new result, not a change to this one: files without a checksum share theirs (see judge).
        results[rel] = replace(
            result,
            flag=(
                f"{rel}: {facts.size:,} B here but {words}, and each copy is complete by its own manifest "
                "(two different saves of this step?)"
            ),
        )


def _verdict(c: CopyEvidence, results: dict[str, _FileResult], *, alone: bool) -> Verdict:
    corrupt = [r.corrupt for r in results.values() if r.corrupt]
    flags = [r.flag for r in results.values() if r.flag and not r.corrupt]
    if corrupt or flags:
        # A mismatch with the copy's own manifest is one its format has already found and judged.
        adds = [
            r.corrupt
            for r in results.values()
            if r.corrupt and not (r.own_manifest_mismatch and c.state == CopyState.CORRUPT)
        ]
        bases = {r.basis for r in results.values() if r.corrupt and r.basis}
        basis = next((b for b in _BASIS_ORDER if b in bases), VerificationBasis.PEERS)
        return Verdict(Verification.MISMATCH, reasons=[*corrupt, *flags], corrupt=adds, basis=basis)
    disputes = [r.dispute for r in results.values() if r.dispute]
    if disputes:
        shown = disputes[:5] + ([f"and {len(disputes) - 5:,} more files"] if len(disputes) > 5 else [])
        return Verdict(Verification.DISPUTED, reasons=[*shown, SETTLE_HINT])

    # Files that are the manifest itself need no reference: nothing can record its own checksum.
    required = {rel: r for rel, r in results.items() if not (c.manifest and rel.rpartition("/")[2] in MANIFEST_FILES)}
    total = len(required)
    if total == 0:
        return Verdict(Verification.UNVERIFIED, ["no files to verify"])
    if c.temporary:
        return Verdict(Verification.UNVERIFIED, ["a left-over of an interrupted save is not verified"])
    if c.state != CopyState.COMPLETE:
        return Verdict(
            Verification.UNVERIFIED, [f"the copy is {c.state}: only a complete copy can be verified as a whole"]
        )
    if all(r.agree for r in required.values()):
        # Name what every file agrees with; only when nothing is common to all, what each agrees with.
        sources = set.intersection(*(set(r.agree) for r in required.values())) or set().union(
            *(r.agree for r in required.values())
        )
        bases = {r.basis for r in required.values() if r.basis}
        basis = next((b for b in _BASIS_ORDER if b in bases), VerificationBasis.PEERS)
        return Verdict(
            Verification.VERIFIED, [f"all {_plural(total, 'file')} agree with {_names(sources)}"], basis=basis
        )

    reasons: list[str] = []
    none = sum(1 for r in required.values() if r.no_checksum == "none")
    if none:
        reasons.append(f"{_of(none, total)} no content checksum")
    labels = Counter(
        r.no_checksum for r in required.values() if r.no_checksum and r.no_checksum != "none" and not r.incomparable
    )
    for label, n in sorted(labels.items()):
        reasons.append(f"{_of(n, total)} only {label}, not a checksum of the content")
    pairs = Counter(r.incomparable for r in required.values() if r.incomparable)
    for (mine, theirs), n in sorted(pairs.items()):
        if not mine:  # a hint a person can act on
            reasons.append(f"checksums not comparable for {n:,} of {_plural(total, 'file')}: {theirs}")
        else:
            reasons.append(f"checksums not comparable: {_of(n, total)} {mine} here, the references {theirs}")
    unreferenced = sum(1 for r in required.values() if r.no_reference)
    if unreferenced:
        if alone and not c.manifest:
            reasons.append("no reference: this is the only copy and its writer recorded no checksums")
        else:
            reasons.append(
                f"no reference for {unreferenced:,} of {_plural(total, 'file')}: "
                "no other copy or writer's manifest has a comparable checksum"
            )
    miscopied = [r for r in required.values() if r.miscopied and not r.agree]
    if miscopied:
        wheres = {w for r in miscopied for w in r.miscopied}
        reasons.append(
            f"{_of(len(miscopied), total, 'differ')} in the copy at {_names(wheres)}, which the product made from this "
            "copy after its checksums were taken: that copy is the wrong one, and nothing else verifies this one"
        )
    agreed = sum(1 for r in required.values() if r.agree)
    if agreed:
        reasons.append(f"{_of(agreed, total, 'agree')} with a reference")
    return Verdict(Verification.UNVERIFIED, reasons)


# What decides, strongest first: a verdict names the strongest basis among its files'.
_BASIS_ORDER = (
    VerificationBasis.MANIFEST,
    VerificationBasis.SOURCE,
    VerificationBasis.FORMAT,
    VerificationBasis.MAJORITY,
    VerificationBasis.PEERS,
)
SETTLE_HINT = (
    "to settle it: a checksum written at save time (a ckptfleet.json sidecar with sha256), a third copy, or the "
    "format's own checks (the agent's --checksums reads a torch zip's member CRCs); which copy another was made "
    "from counts only where the product made it (a move, an offload, a promotion)"
)


# --- failure domains ------------------------------------------------------------------------------


def failure_domain(location: Any) -> str:
    """The failure domain a copy at ``location`` lives in, as a label.

    A copy on a host (NVMe, a host's parallel-file-system mount) dies with its host: its domain is
    the host. A host-less location (an object-storage bucket) is replicated across zones by its
    store and dies with its region: its domain is the region, or the location itself when no region
    is recorded. Two copies on two drives of one host, or two buckets in one region, share a domain.
    "N verified copies in M failure domains" counts the distinct labels of the verified copies.
    """
    host = getattr(location, "host", None) if getattr(location, "host_id", None) else None
    if host is not None:
        return f"host {host.name}"
    region = location.failure_region
    return f"region {region}" if region else f"location {location.name}"


@dataclass(frozen=True)
class VerificationSummary:
    """How many present copies of a checkpoint are verified, and in which failure domains."""

    verified: int = 0
    domains: tuple[str, ...] = ()

    @property
    def domain_count(self) -> int:
        return len(self.domains)


def summarize(copies: Iterable[Any]) -> VerificationSummary:
    """The summary of some present copies (with their locations and hosts loaded)."""
    verified = [c for c in copies if c.verification == Verification.VERIFIED and c.gone_at is None]
    return VerificationSummary(len(verified), tuple(sorted({failure_domain(c.location) for c in verified})))


# --- the database wrapper -------------------------------------------------------------------------


def carried_over(copy: Any, state: str, reasons: list[str]) -> tuple[str, list[str]]:
    """The formats' verdict with what verification last added to it, for ``location_recognize``.

    Re-judging from the formats would drop the corrupt state and reasons that a checksum mismatch
    added, and ``checkpoints_verify`` would add them back: carrying them over saves both writes.
    Verification runs after it in the same transaction and takes them back if they no longer hold.
    """
    own = _own_reasons(copy)
    if not own:
        return state, reasons
    return CopyState.CORRUPT, [*reasons, *(r for r in own if r not in reasons)]


def _own_reasons(copy: Any) -> list[str]:
    if copy.verification != Verification.MISMATCH:
        return []
    added = set(copy.verification_reasons or [])
    return [r for r in copy.reasons or [] if r in added]


def checkpoints_verify(
    checkpoint_ids: Iterable[int],
    *,
    judged: Mapping[int, tuple[str, list[str]]] | None = None,
    known: Mapping[int, Mapping[str, tuple[str, FileFacts]]] | None = None,
) -> int:
    """Verify every present copy of these checkpoints; returns how many copies were written.

    ``judged`` maps the ids of copies the formats have just judged to that verdict (state, reasons);
    for the others it is what is stored, less what verification added. ``known`` gives the member
    files of copies the caller already holds ({copy id: {path: (path, FileFacts)}}, as they are
    linked now); the others' are read, in batches of checkpoints of about ``FILES_PER_BATCH`` files.
    Run it in the transaction that judged the copies; it writes only what changed, with ``update_fields``.
    """

    ids = sorted(set(checkpoint_ids))
    judged = judged or {}
    known = known or {}
    written = 0
    restated: list[int] = []
    for i in range(0, len(ids), 1000):
        by_checkpoint: dict[int, list[Any]] = defaultdict(list)
        for copy in (
            CheckpointCopy.objects.filter(checkpoint_id__in=ids[i : i + 1000], gone_at__isnull=True)
            .select_related("location", "location__host")
            .order_by("checkpoint_id", "pk")
        ):
            by_checkpoint[copy.checkpoint_id].append(copy)
        for batch in _batches(by_checkpoint, known):
            copies = [c for checkpoint_id in batch for c in by_checkpoint[checkpoint_id]]
            borrowed: dict[int, dict[str, FileFacts]] = {}
            prints: dict[int, str] = {}  # content prints computed on the way, not computed twice
            for checkpoint_id in batch:
                borrowed.update(_same_content(by_checkpoint[checkpoint_id], known, judged, prints))
            files = _member_files([c.pk for c in copies if c.pk not in known and c.pk not in borrowed])
            files.update((c.pk, known[c.pk]) for c in copies if c.pk in known)
            dirty: list[tuple[Any, list[str]]] = []
            for checkpoint_id in batch:
                dirty += _verify_one(by_checkpoint[checkpoint_id], files, judged, borrowed, prints)
            if dirty:
                # One statement per batch, not one per copy; fields a copy did not change keep their value.
                fields = sorted({f for _, changed in dirty for f in changed})
                _write_verdicts([c for c, _ in dirty], fields)
                written += len(dirty)
                restated.extend(c.pk for c, changed in dirty if "state" in changed)
    if restated:
        # One verdict, every view: the spend and waste rows by state follow at once, at every location.
        copies_restated(restated)
    return written


# The columns a verdict changes, with their PostgreSQL types (JSON as text, cast where it is assigned).
_VERDICT_COLUMNS = {
    "verification": "text",
    "verification_reasons": "jsonb",
    "verification_basis": "text",
    "verified_at": "timestamptz",
    "content_print": "text",
    "checksums_at": "timestamptz",
    "state": "text",
    "reasons": "jsonb",
    "judged_at": "timestamptz",
    "verification_changed_at": "timestamptz",
}


def _write_verdicts(copies: list[Any], fields: list[str]) -> None:
    """Write these fields of these copies in one statement: on PostgreSQL an ``UPDATE ... FROM unnest(arrays)``
    (``bulk_update``'s ``CASE WHEN`` per row and field costs more to build than to run), else ``bulk_update``."""

    if connection.vendor != "postgresql" or not set(fields) <= _VERDICT_COLUMNS.keys():
        CheckpointCopy.objects.bulk_update(copies, fields, batch_size=500)
        return
    meta = CheckpointCopy._meta
    arrays: list[list] = [[c.pk for c in copies]]
    selects, sets = ["unnest(%s::bigint[]) AS id"], []
    for i, name in enumerate(fields):
        kind = _VERDICT_COLUMNS[name]
        values = [getattr(c, name) for c in copies]
        if kind == "jsonb":
            values = [None if v is None else json.dumps(v) for v in values]
            selects.append(f"unnest(%s::text[]) AS v{i}")
            sets.append(f"{meta.get_field(name).column} = v.v{i}::jsonb")
        else:
            selects.append(f"unnest(%s::{kind}[]) AS v{i}")
            sets.append(f"{meta.get_field(name).column} = v.v{i}")
        arrays.append(values)
    table = meta.db_table
    sql = f"UPDATE {table} SET {', '.join(sets)} FROM (SELECT {', '.join(selects)}) v WHERE {table}.id = v.id"  # noqa: S608 - fixed names
    with connection.cursor() as cursor:
        cursor.execute(sql, arrays)


def _batches(by_checkpoint: dict[int, list[Any]], known: Mapping[int, Any]) -> Iterable[list[int]]:
    """Checkpoints in batches whose copies not in ``known`` hold about ``FILES_PER_BATCH`` files."""
    batch: list[int] = []
    weight = 0
    for checkpoint_id, members in sorted(by_checkpoint.items()):
        batch.append(checkpoint_id)
        weight += sum(max(c.file_count, 1) for c in members if c.pk not in known)
        if weight >= FILES_PER_BATCH:
            yield batch
            batch, weight = [], 0
    if batch:
        yield batch


def _member_files(copy_ids: list[int]) -> dict[int, dict[str, tuple[str, FileFacts]]]:
    """The present member files of these copies, read with a plain cursor: a copy has as many files as its
    checkpoint has shards, and the ORM's per-row work cost more than the comparison they are read for."""

    files: dict[int, dict[str, tuple[str, FileFacts]]] = defaultdict(dict)
    table = ShardFile._meta.db_table
    for i in range(0, len(copy_ids), 1000):
        chunk = copy_ids[i : i + 1000]
        if connection.vendor == "postgresql":
            where, params = "copy_id = ANY(%s)", [chunk]
        else:
            where, params = f"copy_id IN ({', '.join(['%s'] * len(chunk))})", chunk
        if connection.vendor == "postgresql":
            # Facts matter only for torch zips' member checks: the others' are not sent over the wire.
            extra = (
                "extract(epoch FROM mtime)::float8, digests::text, "
                "CASE WHEN facts ? 'members_bad' THEN facts::text END, first_checksum::text"
            )
        else:
            extra = "mtime, digests, CASE WHEN json_extract(facts, '$.members_bad') IS NOT NULL THEN facts END, "
            extra += "first_checksum"
        epoch = float if connection.vendor == "postgresql" else sqlite_epoch
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT copy_id, path, size, checksum, checksum_algo, {extra} "  # noqa: S608 - fixed names
                f"FROM {table} WHERE {where} AND gone_at IS NULL",
                params,
            )
            current_id, current = None, {}
            while rows := cursor.fetchmany(5000):
                for copy_id, path, size, digest, algo, mtime, digests, facts, first in rows:
                    if copy_id != current_id:  # the index gives a copy's files together
                        current_id, current = copy_id, files[copy_id]
                    current[path] = (path, FileFacts(size, algo, digest, digests, epoch(mtime), facts, first))
    return files


def _verified_at(files: Mapping[str, FileFacts]) -> datetime | None:
    """When a verified copy was verified: the oldest time its files' checksums were taken (None when unknown)."""
    times = [t for f in files.values() if (t := _checked_at(f)) is not None]
    return datetime.fromtimestamp(min(times), UTC) if times else None


# The "at" of stored digests text, read without decoding a whole block list (no space from json.dumps, one
# from PostgreSQL's jsonb).
_AT = re.compile(r'"at": ?(-?[0-9.eE+-]+)')


def _checked_at(facts: FileFacts) -> float | None:
    if facts.parsed is None and isinstance(facts.digests, str):
        found = _AT.search(facts.digests)
        return float(found.group(1)) if found else None
    at = facts.other().get("at")
    return float(at) if isinstance(at, (int, float)) else None


def content_print(files: Mapping[str, FileFacts]) -> str:
    """A copy's content fingerprint: the sha256 of its files' (relative path, size, main checksum), or "" when a
    file has no content checksum or keeps a first checksum (its judgement then needs the files themselves)."""
    if not files:
        return ""
    lines = []
    for rel, f in files.items():
        if f.first or not _is_content(f):
            return ""
        lines.append(f"{rel}\0{f.size}\0{f.algo}\0{f.digest}")
    lines.sort()
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogatepass")).hexdigest()


def _same_content(
    copies: list[Any], known: Mapping, judged: Mapping, prints: dict[int, str]
) -> dict[int, dict[str, FileFacts]]:
    """{copy id: files} for the copies of one checkpoint whose files need not be read: every copy is complete,
    no writer's manifest and no earlier mismatch is involved, and each copy not in ``known`` holds exactly
    the content (``content_print``) of a copy that is, whose files then stand for its own in the judgement.
    A second copy of a million files is then compared without reading the first one's back."""
    unread = [c for c in copies if c.pk not in known]
    held = [c for c in copies if c.pk in known]
    if not unread or not held:
        return {}
    for c in copies:
        if c.temporary or c.reference_checksums or c.verification == Verification.MISMATCH:
            return {}
        state = judged[c.pk][0] if c.pk in judged else c.state
        if state != CopyState.COMPLETE:
            return {}
    relative = _relative_files(known[held[0].pk], held[0].path)
    fingerprint = prints[held[0].pk] = content_print(relative)
    for c in held[1:]:
        prints[c.pk] = content_print(_relative_files(known[c.pk], c.path))
    if not fingerprint or any(prints[c.pk] != fingerprint for c in held[1:]):
        return {}
    if any(c.content_print != fingerprint for c in unread):
        return {}
    return {c.pk: relative for c in unread}


def _verify_one(
    copies: list[Any],
    files: dict[int, dict[str, tuple[str, FileFacts]]],
    judged: Mapping,
    borrowed: Mapping[int, Mapping[str, FileFacts]] | None = None,
    prints: Mapping[int, str] | None = None,
) -> list[tuple[Any, list[str]]]:
    """Judge the copies of one checkpoint; returns the copies whose verdict changed (set on them) and the fields.

    ``borrowed`` gives the files of copies not read, which hold the same content as a copy that was
    (``_same_content``): judged with them, their time of verification is left as it was."""
    borrowed = borrowed or {}
    names = Counter(c.location.name for c in copies)
    bases: dict[int, tuple[str | None, list[str]]] = {}
    evidence = []
    for copy in copies:
        members = files.get(copy.pk, {})
        bases[copy.pk] = base = _base_verdict(copy, judged, members)
        where = copy.location.name if names[copy.location.name] == 1 else f"{copy.location.name} ({copy.path})"
        evidence.append(
            CopyEvidence(
                id=copy.pk,
                where=where,
                # A copy whose formats' verdict is unknown (see _base_verdict) does not speak as a peer.
                state=base[0] or CopyState.CORRUPT,
                temporary=copy.temporary,
                manifest=copy.reference_checksums or {},
                files=borrowed[copy.pk] if copy.pk in borrowed else _relative_files(members, copy.path),
                made_from=copy.made_from_id,
                made_at=copy.made_at.timestamp() if copy.made_at is not None else None,
                made_by=copy.made_by,
            )
        )
    verdicts = _same_print_verdicts(copies, evidence, bases, borrowed, prints or {}) or judge(evidence)
    by_copy = {e.id: e.files for e in evidence}
    now = timezone.now()
    dirty = []
    for copy in copies:
        verdict = verdicts[copy.pk]
        state, reasons = bases[copy.pk]
        if verdict.corrupt:
            state, reasons = CopyState.CORRUPT, [*reasons, *(r for r in verdict.corrupt if r not in reasons)]
        elif state is None:
            state, reasons = copy.state, [*reasons, STALE_MISMATCH]
        values = {
            "verification": verdict.verification,
            "verification_reasons": verdict.reasons,
            "verification_basis": verdict.basis if verdict.verification != Verification.UNVERIFIED else "",
            "state": state,
            "reasons": reasons,
        }
        if copy.pk not in borrowed:  # a borrowed copy keeps what its own files said when they were read
            known_print = (prints or {}).get(copy.pk)
            values["content_print"] = known_print if known_print is not None else content_print(by_copy[copy.pk])
            values["checksums_at"] = _verified_at(by_copy[copy.pk])
        if verdict.verification == Verification.VERIFIED:
            # Without the times the checksums were taken (an older agent), the time it was first found verified.
            taken = values.get("checksums_at", copy.checksums_at)
            if taken is not None or copy.verified_at is None:
                values["verified_at"] = taken or now
        else:
            values["verified_at"] = None
        changed = [k for k, v in values.items() if getattr(copy, k) != v]
        if not changed:
            continue
        for k in changed:
            setattr(copy, k, values[k])
        if "state" in changed or "reasons" in changed:
            copy.judged_at = now
            changed.append("judged_at")
        if "verification" in changed:
            # Since when the copy has had this verdict: the problems list's "since" for a disputed,
            # mismatched or unverified copy.
            copy.verification_changed_at = now
            changed.append("verification_changed_at")
        dirty.append((copy, changed))
    return dirty


def _same_print_verdicts(
    copies: list[Any],
    evidence: list[CopyEvidence],
    bases: Mapping[int, tuple[str | None, list[str]]],
    borrowed: Mapping[int, Mapping[str, FileFacts]],
    prints: Mapping[int, str],
) -> dict[int, Verdict] | None:
    """The verdicts ``judge`` gives when two or more copies hold the same content, decided from their content
    prints alone; None when it takes the files. Every copy is complete by its formats and not a left-over, none
    has a writer's manifest, and every one's print (read now, or stored for a copy whose files were not read)
    is the same and not empty: no file keeps a first checksum, each has a content checksum, and the copies
    hold the same paths, sizes and checksums. Then every file of each agrees with every other copy, as
    ``_plain_agreement`` would find file by file (tested side by side)."""
    if len(evidence) < 2:
        return None
    seen = set()
    for copy, e in zip(copies, evidence, strict=True):
        if e.temporary or e.manifest or bases[copy.pk][0] != CopyState.COMPLETE:
            return None
        seen.add(copy.content_print if copy.pk in borrowed else prints.get(copy.pk))
    if len(seen) != 1 or not next(iter(seen)):
        return None
    total = len(evidence[0].files)
    verdicts = {}
    for e in evidence:
        sources = {f"the copy at {d.where}" for d in evidence if d.id != e.id}
        verdicts[e.id] = Verdict(
            Verification.VERIFIED,
            [f"all {_plural(total, 'file')} agree with {_names(sources)}"],
            basis=VerificationBasis.PEERS,
        )
    return verdicts


def _relative_files(members: Mapping[str, tuple[str, FileFacts]], copy_path: str) -> dict[str, FileFacts]:
    """{path relative to the copy: facts} of a copy's member files (``relative_path``, inlined for the common case)."""
    prefix = copy_path + "/"
    cut = len(prefix)
    return {
        (path[cut:] if path.startswith(prefix) else relative_path(path, copy_path)): facts
        for path, facts in members.values()
    }


STALE_MISMATCH = "an earlier checksum mismatch no longer stands; judge the location again to clear this state"


def _base_verdict(
    copy: Any, judged: Mapping, members: Mapping[str, tuple[str, FileFacts]]
) -> tuple[str | None, list[str]]:
    """The formats' verdict (state, reasons) on a copy, before verification added to it.

    Just judged: as given. Never marked corrupt by verification: as stored. Marked corrupt by it
    before and not judged now: the stored reasons less the ones verification added, but the state
    the formats gave is not stored, so the copy's run directory is recognised again (rare: only
    while a mismatch stands); the state is None when even that does not find the copy.
    """
    if copy.pk in judged:
        state, reasons = judged[copy.pk]
        return state, list(reasons)
    own = _own_reasons(copy)
    if not own:
        return copy.state, list(copy.reasons or [])
    stored = [r for r in copy.reasons or [] if r not in own and r != STALE_MISMATCH]
    again = _recognise_again(copy, [path for path, _ in members.values()])
    return (again[0], again[1]) if again is not None else (None, stored)


def _recognise_again(copy: Any, member_paths: list[str]) -> tuple[str, list[str]] | None:
    """The formats' verdict on one copy, from the files of its run directory at its location."""

    if not member_paths:
        return None
    template = PathTemplate.parse(copy.location.path_template)
    group = template.group_of(min(member_paths))
    entries = [entry for _, _, entry in group_files(copy.location, template, group)]
    for found in recognize(entries):
        if found.path == copy.path:
            return found.state, list(found.reasons)
    return None


# --- staleness: checksums go stale (bit rot, a rewrite the store did not show) ----------------------------


def stale_days() -> int:
    return settings.VERIFY_STALE_DAYS


def stale_cutoff(now: datetime | None = None) -> datetime:
    """Copies verified before this are flagged: checksums go stale (bit rot, a rewrite the store did not show)."""
    return (now or timezone.now()) - timedelta(days=stale_days())


def stale_verified_copies(now: datetime | None = None) -> Q:
    """Present verified copies whose oldest checksum behind the verdict was taken before ``stale_cutoff``.

    A copy verified before verification recorded its time (``verified_at`` empty) is not flagged: when it
    was verified is unknown, and its next verification records it.
    """
    return Q(
        gone_at__isnull=True,
        temporary=False,
        verification=Verification.VERIFIED,
        verified_at__lt=stale_cutoff(now),
    )


def is_verification_stale(copy: Any, now: datetime | None = None) -> bool:
    """``stale_verified_copies`` for one loaded copy."""
    return (
        copy.gone_at is None
        and not copy.temporary
        and copy.verification == Verification.VERIFIED
        and copy.verified_at is not None
        and copy.verified_at < stale_cutoff(now)
    )
