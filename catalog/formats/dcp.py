"""PyTorch Distributed Checkpoint (``torch.distributed.checkpoint``), including torchtitan's ``step-N/``.

Layout (torch/distributed/checkpoint/filesystem.py): every rank writes ``__{rank}_{i}.distcp``; the
coordinator then pickles a ``Metadata`` whose ``storage_data`` names every file with the byte range each
item occupies, writes it to ``.metadata.tmp``, fsyncs and renames it to ``.metadata`` -- so ``.metadata``
is the commit record *and* the manifest. With ``use_collectives=False`` each rank writes its own
``__{rank}.metadata`` (via ``__{rank}.metadata.tmp``) listing only its files.

Judgement, from the agent's ``dcp_metadata`` facts (``{"files": {relative_path: min_size}}``):

- a file listed in the manifest is missing -> partial; shorter than ``max(offset + length)`` -> corrupt;
- no manifest beside ``.distcp`` files -> partial (the coordinator never finished);
- ``.metadata.tmp`` or Megatron's ``.metadata.bck`` left behind -> partial and temporary;
- ``.metadata`` older than the newest ``.distcp`` -> partial: a later save overwrote the shards in place
  and died before replacing the manifest (the overwrite trap). This trusts mtimes as write order, which
  holds on the file system the job wrote to, not for an upload or a plain copy: see
  ``catalog.recognition.recognize(write_order_mtimes=False)``.

Without facts (a bucket listing) the rank numbers in the file names are checked for gaps instead, and a
note says the number of ranks is inferred from the files present (a save missing its highest rank would look
whole). The same note goes with per-rank manifests: each ``__{rank}.metadata`` "describes only its own writes"
(torch's FileSystemWriter docstring), so no file records how many ranks there were.
"""

from __future__ import annotations

import re

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import (
    MTIME_TOLERANCE_SECONDS,
    check_member_files,
    check_torch_file,
    contiguous_gaps,
    facts_of,
    lookup,
    mark_unfinished,
    new_found,
    note_inferred,
    plural,
    ranks_list,
    size_words,
)

METADATA = ".metadata"
_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")
_TMP_METADATA = re.compile(r"^(?:__\d+)?\.metadata\.tmp$")
_DISTCP = re.compile(r"^__(\d+)_(\d+)\.distcp$")


def is_dcp_dir(directory: DirView) -> bool:
    """Whether a directory holds a DCP save (or what is left of one)."""
    for name in directory.files:
        if (
            name in (METADATA, ".metadata.bck")
            or name.endswith(".distcp")
            or _RANK_METADATA.match(name)
            or _TMP_METADATA.match(name)
        ):
            return True
    return False


def check_dcp(found: Found, directory: DirView, where: str = "") -> None:
    """Judge the DCP save in ``directory`` against its own manifest; ``where`` prefixes file names in
    reasons when the DCP save is a part of a larger checkpoint (e.g. ``pytorch_model_fsdp_0/``)."""
    files = directory.files
    distcp = {name: entry for name, entry in files.items() if name.endswith(".distcp")}

    for name in sorted(n for n in files if _TMP_METADATA.match(n)):
        found.temporary = True
        found.fail(PARTIAL, f"interrupted save: {where}{name} left behind")
    if ".metadata.bck" in files:
        found.temporary = True
        found.fail(PARTIAL, f"interrupted save: {where}.metadata.bck left behind")

    if METADATA in files:
        manifests = {METADATA: files[METADATA]}
    else:
        manifests = {name: entry for name, entry in files.items() if _RANK_METADATA.match(name)}
        ranks = {int(_RANK_METADATA.match(name).group(1)) for name in manifests}
        for rank in contiguous_gaps(ranks):
            found.fail(
                PARTIAL,
                f"{where}__{rank}.metadata is missing (ranks {ranks_list(ranks)} wrote their own manifests)",
            )
        if ranks:
            note_inferred(
                found,
                f"the number of ranks ({max(ranks) + 1:,})",
                f"each {where}__N.metadata lists only its own rank's files",
            )
    if not manifests:
        if distcp:
            found.fail(
                PARTIAL,
                f"{where}.metadata is missing: the coordinator never finished the save "
                f"({plural(len(distcp), '.distcp file')} present)",
            )
        elif not found.temporary:
            found.fail(PARTIAL, f"{where}.metadata is missing")
        return

    # Expected files and their minimum sizes, merged over every manifest (one, or one per rank).
    expected: dict[str, int] = {}
    unread: list[str] = []
    for name, entry in sorted(manifests.items()):
        facts = facts_of(entry, "dcp_metadata")
        if facts is None:
            unread.append(name)
        elif "error" in facts:
            found.fail(CORRUPT, f"{where}{name} cannot be read: {facts['error']}")
        else:
            for relative, size in (facts.get("files") or {}).items():
                expected[relative] = max(expected.get(relative, 0), int(size))

    own = directory.files
    for relative, minimum in sorted(expected.items()):
        # Most manifests name files of the save's own directory: looked up there at once.
        entry = lookup(directory, relative) if "/" in relative else own.get(relative)
        if entry is None:
            what = "rank file" if relative.endswith(".distcp") else "file"
            manifest = _manifest_for(relative, manifests)
            found.fail(PARTIAL, f"{what} {where}{relative} is missing (listed in {where}{manifest})")
        elif entry.size < minimum:
            short, manifest = size_words(minimum - entry.size), _manifest_for(relative, manifests)
            found.fail(CORRUPT, f"{where}{relative} is {short} shorter than {where}{manifest} says")
    if expected:
        stray = sorted(set(distcp) - set(expected))
        if stray:
            # Not fatal: DCP loads only what the manifest names. Usually left over from an earlier save.
            found.reasons.append(
                f"{plural(len(stray), 'file')} not listed in the manifest ({where}{stray[0]}"
                f"{', ...' if len(stray) > 1 else ''}): left over from an earlier save?"
            )
        found.expected_files = (found.expected_files or 0) + len(expected) + len(manifests)
        found.expected_bytes = (
            (found.expected_bytes or 0) + sum(expected.values()) + sum(e.size for e in manifests.values())
        )
    elif unread:
        ranks = {int(m.group(1)) for n in distcp if (m := _DISTCP.match(n))}
        note_inferred(
            found,
            f"the number of ranks ({max(ranks, default=-1) + 1:,})",
            f"{where}{unread[0]} was not read, so completeness is judged from file names only",
        )
        for rank in contiguous_gaps(ranks):
            found.fail(
                PARTIAL,
                f"no {where}__{rank}_*.distcp although ranks {ranks_list(ranks)} wrote theirs",
            )

    _check_overwrite(found, manifests, distcp, where)


def _manifest_for(relative: str, manifests: dict[str, object]) -> str:
    """Which manifest names a file: the global one, or the per-rank one of the file's rank."""
    if METADATA in manifests:
        return METADATA
    match = _DISTCP.match(relative)
    if match and f"__{match.group(1)}.metadata" in manifests:
        return f"__{match.group(1)}.metadata"
    return "the rank manifests"


def _check_overwrite(found: Found, manifests: dict, distcp: dict, where: str) -> None:
    """The coordinator writes the manifest after every shard, so a shard newer than it was rewritten
    by a later save into the same directory that never reached its own manifest."""
    for name, manifest in sorted(manifests.items()):
        if not manifest.mtime:
            continue
        rank_match = _RANK_METADATA.match(name)
        prefix = f"__{rank_match.group(1)}_" if rank_match else "__"
        shards = [e for n, e in distcp.items() if n.startswith(prefix) and e.mtime]
        if not shards:
            continue
        newest = max(shards, key=lambda e: e.mtime)
        if newest.mtime > manifest.mtime + MTIME_TOLERANCE_SECONDS:
            found.fail(PARTIAL, f"{where}{name} is older than {where}{newest.name} (overwritten save?)")


class DCPFormat(CheckpointFormat):
    """A directory holding a PyTorch DCP save: ``.metadata`` (or ``__N.metadata``) and ``__R_i.distcp``."""

    name = "pytorch_dcp"
    label = "PyTorch Distributed Checkpoint"
    priority = 50

    def claim(self, directory: DirView) -> list[Found]:
        if not is_dcp_dir(directory):
            return []
        found = new_found(directory, self.name)
        check_dcp(found, directory)
        # Other files a DCP directory often holds (Lightning's meta.pt, Composer's extras).
        _check_extras(found, directory)
        mark_unfinished(found, directory.parent, directory.name)
        return [found]


def _check_extras(found: Found, directory: DirView) -> None:
    for name, sub in directory.dirs.items():
        check_member_files(found, sub, f"{name}/")
    for name, entry in directory.files.items():
        if name.endswith((".pt", ".pth")):
            check_torch_file(found, entry, name)
