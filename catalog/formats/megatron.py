"""Megatron-LM / NeMo: legacy ``iter_NNNNNNN/mp_rank_XX/`` and distributed (``torch_dist``) checkpoints.

Both live under a save dir with the tracker ``latest_checkpointed_iteration.txt`` ("2000" or "release"),
which Megatron rewrites after a save is whole.

Legacy (``--ckpt-format torch``): ``iter_{:07d}/mp_rank_{tp:02d}[_{pp:03d}][_{ep:03d}]/model_optim_rng.pt``
[+ ``distrib_optim.pt``], the ``_{pp:03d}`` part only when the pipeline size is above 1 and ``_{ep:03d}`` only
when the expert size is (megatron/training/checkpointing.py ``get_checkpoint_name``). No manifest, but every
``model_optim_rng.pt`` holds ``state_dict['args'] = args`` (``generate_state_dict``), the job's argparse.Namespace
with its ``tensor_model_parallel_size``, ``pipeline_model_parallel_size`` and ``expert_model_parallel_size``, which
``check_checkpoint_args`` compares on load. The agent reports them as ``"megatron": {...}`` in the torch_file
facts. So: the tensor x pipeline (x expert) grid those sizes record must be whole (files recording different
sizes -> corrupt: two saves mixed); without them (a bucket listing) the grid is taken from the highest rank
folder present, and the verdict says so, since a save missing its highest rank then looks complete. Every rank
dir needs ``model_optim_rng.pt`` (and ``distrib_optim.pt`` if any has it), every file a whole zip, and an
iteration newer than the tracker is partial (the tracker is the only commit signal).

Distributed (``torch_dist``, also NeMo's distributed checkpoints): a DCP save (``.metadata`` +
``__R_k.distcp``) plus ``metadata.json`` ``{"sharded_backend": "torch_dist"}`` [+ ``common.pt``]
[+ ``integrity.json`` ``{"algorithm": "sha256", "files": {name: hexdigest}}``], written in the order
shards -> .metadata -> metadata.json -> integrity.json -> tracker. The DCP manifest decides
completeness; ``metadata.json`` missing after ``.metadata`` -> partial; a file ``integrity.json`` lists is
missing -> partial, its sha256 differing (when the inventory has checksums) -> corrupt. An iteration newer
than the tracker is only noted: the manifest already proves the save whole.

NeMo writes ``<checkpoint>-unfinished`` beside a checkpoint while saving it: such a copy is temporary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import (
    check_torch_file,
    facts_of,
    json_content,
    lookup,
    mark_unfinished,
    new_found,
    note_inferred,
    plural,
    text_content,
)
from catalog.formats.dcp import check_dcp, is_dcp_dir

TRACKER = "latest_checkpointed_iteration.txt"
MODEL_FILE = "model_optim_rng.pt"
_ITER = re.compile(r"^iter_(\d{7})$")
_RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")


def _tracker_iteration(directory: DirView) -> str | None:
    if directory.parent is None:
        return None
    return text_content(directory.parent.files.get(TRACKER))


def _iteration(directory: DirView) -> int | None:
    match = _ITER.match(directory.name)
    return int(match.group(1)) if match else None


def _newer_than_tracker(directory: DirView) -> str | None:
    """A reason when this iteration is newer than the tracker file says, else None."""
    tracker = _tracker_iteration(directory)
    iteration = _iteration(directory)
    if tracker is None or iteration is None or not tracker.isdigit():
        return None  # "release" or unreadable: nothing to compare
    if iteration > int(tracker):
        return f"iteration {iteration} is newer than {TRACKER} ({int(tracker)})"
    return None


class MegatronLegacyFormat(CheckpointFormat):
    """``iter_NNNNNNN/`` (or ``release/``) with one ``mp_rank_*`` directory per model-parallel rank."""

    name = "megatron"
    label = "Megatron-LM (legacy)"
    priority = 10

    def claim(self, directory: DirView) -> list[Found]:
        if not (_ITER.match(directory.name) or directory.name == "release"):
            return []
        ranks = {name: m for name in directory.dirs if (m := _RANK_DIR.match(name))}
        if not ranks:
            return []
        found = new_found(directory, self.name)

        coords = {name: (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)) for name, m in ranks.items()}
        recorded = recorded_grid(found, directory, sorted(ranks))
        if recorded is not None:
            _check_recorded_grid(found, recorded, coords)
        else:
            _check_inferred_grid(found, ranks, coords)

        with_distrib = {name for name in ranks if "distrib_optim.pt" in directory.dirs[name].files}
        for name in sorted(ranks):
            sub = directory.dirs[name]
            if "model_optim_rng.pt" not in sub.files:
                found.fail(PARTIAL, f"{name}/model_optim_rng.pt is missing")
            if with_distrib and name not in with_distrib:
                found.fail(PARTIAL, f"{name}/distrib_optim.pt is missing (other ranks have theirs)")
            for file_name, entry in sorted(sub.files.items()):
                if file_name.endswith(".pt"):
                    check_torch_file(found, entry, f"{name}/{file_name}")

        newer = _newer_than_tracker(directory)
        if newer:
            found.fail(PARTIAL, f"{newer}: Megatron updates the tracker after a save is whole")
        mark_unfinished(found, directory.parent, directory.name)
        return [found]


@dataclass(frozen=True)
class Grid:
    """The tensor x pipeline x expert sizes a legacy save's ``args`` record, and the file that says so."""

    tp: int
    pp: int
    ep: int
    source: str

    def names(self) -> list[str]:
        """Every rank folder Megatron writes for this grid (``get_checkpoint_name``)."""
        return [
            _rank_dir_name(tp, pp if self.pp > 1 else None, ep if self.ep > 1 else None)
            for tp in range(self.tp)
            for pp in range(self.pp)
            for ep in range(self.ep)
        ]

    def words(self) -> str:
        sizes = [f"tensor_model_parallel_size {self.tp}", f"pipeline_model_parallel_size {self.pp}"]
        if self.ep > 1:
            sizes.append(f"expert_model_parallel_size {self.ep}")
        return f"{self.source} records " + ", ".join(sizes)


def recorded_grid(found: Found, directory: DirView, rank_dirs: list[str]) -> Grid | None:
    """The grid the rank files' ``args`` record; None when none was read (or they disagree: corrupt)."""
    seen: dict[tuple[int, int, int], list[str]] = {}
    for name in rank_dirs:
        facts = facts_of(directory.dirs[name].files.get(MODEL_FILE), "torch_file")
        sizes = facts.get("megatron") if facts is not None else None
        if not isinstance(sizes, dict) or not _size(sizes.get("tensor_model_parallel_size")):
            continue
        key = (
            sizes["tensor_model_parallel_size"],
            _size(sizes.get("pipeline_model_parallel_size")) or 1,
            _size(sizes.get("expert_model_parallel_size")) or 1,
        )
        seen.setdefault(key, []).append(f"{name}/{MODEL_FILE}")
    if len(seen) > 1:
        found.fail(
            CORRUPT,
            "the rank files record different parallel sizes (files of two saves mixed?): "
            + "; ".join(
                f"{names[0]} tensor {tp} x pipeline {pp} x expert {ep}" for (tp, pp, ep), names in seen.items()
            ),
        )
        return None
    for (tp, pp, ep), files in seen.items():
        return Grid(tp=tp, pp=pp, ep=ep, source=files[0])
    return None


def _size(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _check_recorded_grid(found: Found, grid: Grid, coords: dict[str, tuple[int, int, int]]) -> None:
    """Every rank folder the recorded sizes call for must be there, the highest included."""
    expected = grid.names()
    for name in expected:
        if name not in coords:
            found.fail(PARTIAL, f"{name}/{MODEL_FILE} is missing ({grid.words()})")
    stray = sorted(set(coords) - set(expected))
    if stray:
        # Not loaded: each rank opens only its own folder. Usually left over from a save with other sizes.
        found.reasons.append(
            f"{plural(len(stray), 'rank folder')} outside the grid its args record ({stray[0]}"
            f"{', ...' if len(stray) > 1 else ''}): left over from a save with other parallel sizes?"
        )


def _check_inferred_grid(found: Found, ranks: dict[str, re.Match], coords: dict[str, tuple[int, int, int]]) -> None:
    """No rank file's args were read: the grid is what the highest rank folders present make it."""
    has_pp = any(m.group(2) for m in ranks.values())
    has_ep = any(m.group(3) for m in ranks.values())
    tps = {c[0] for c in coords.values()}
    pps = {c[1] for c in coords.values()}
    eps = {c[2] for c in coords.values()}
    grid = [(tp, pp, ep) for tp in range(max(tps) + 1) for pp in range(max(pps) + 1) for ep in range(max(eps) + 1)]
    present = set(coords.values())
    dims = [(tps, "tensor", True), (pps, "pipeline", has_pp), (eps, "expert", has_ep)]
    used = [(values, word) for values, word, on in dims if on]
    shape = (
        " x ".join(word for _, word in used) + " rank grid is " + " x ".join(str(max(values) + 1) for values, _ in used)
    )
    for tp, pp, ep in grid:
        if (tp, pp, ep) not in present:
            name = _rank_dir_name(tp, pp if has_pp else None, ep if has_ep else None)
            found.fail(PARTIAL, f"{name}/{MODEL_FILE} is missing (the {shape})")
    note_inferred(found, f"the {shape.replace(' rank grid is ', ' rank grid (')})", f"no {MODEL_FILE}'s args were read")


def _rank_dir_name(tp: int, pp: int | None, ep: int | None) -> str:
    name = f"mp_rank_{tp:02d}"
    if pp is not None:
        name += f"_{pp:03d}"
    if ep is not None:
        name += f"_{ep:03d}"
    return name


class MegatronDistFormat(CheckpointFormat):
    """A Megatron-core / NeMo distributed checkpoint: ``metadata.json`` with a ``sharded_backend``,
    or an ``iter_NNNNNNN/`` directory holding a DCP save."""

    name = "megatron_dist"
    label = "Megatron-LM distributed (torch_dist)"
    priority = 11

    def claim(self, directory: DirView) -> list[Found]:
        files = directory.files
        content = _peek_json(directory, "metadata.json")
        backend = content.get("sharded_backend") if isinstance(content, dict) else None
        if backend is None and not (_ITER.match(directory.name) and is_dcp_dir(directory)):
            return []
        found = new_found(directory, self.name)
        if backend is None and "metadata.json" in files:
            content = json_content(found, files["metadata.json"], "metadata.json")
            if isinstance(content, dict):
                found.fail(CORRUPT, "metadata.json does not name a sharded_backend")

        if backend in (None, "torch_dist") or is_dcp_dir(directory):
            check_dcp(found, directory)
            if ".metadata" in files and "metadata.json" not in files:
                found.fail(PARTIAL, "metadata.json is missing (Megatron writes it after .metadata)")
        else:
            found.reasons.append(f"sharded backend {backend!r}: only file sizes and names were checked")

        if "common.pt" in files:
            check_torch_file(found, files["common.pt"], "common.pt")
        self._check_integrity(found, directory)

        newer = _newer_than_tracker(directory)
        if newer:
            found.reasons.append(f"{newer}; the save itself is judged by its manifest")
        mark_unfinished(found, directory.parent, directory.name)
        return [found]

    @staticmethod
    def _check_integrity(found: Found, directory: DirView) -> None:
        entry = directory.files.get("integrity.json")
        content = json_content(found, entry, "integrity.json")
        if entry is None or content is None:
            return
        listed = content.get("files") if isinstance(content, dict) else None
        if not isinstance(listed, dict):
            found.fail(CORRUPT, 'integrity.json has no "files" object')
            return
        algo = str(content.get("algorithm") or "sha256").lower()
        # integrity.json lists every file but itself: the most complete expectation there is.
        found.expected_files = max(found.expected_files or 0, len(listed) + 1)
        for relative, value in sorted(listed.items()):
            digest = (value.get(algo) or value.get("digest")) if isinstance(value, dict) else value
            member = lookup(directory, relative)
            if member is None:
                found.fail(PARTIAL, f"{relative} is missing (listed in integrity.json)")
                continue
            if not isinstance(digest, str):
                continue
            digest = digest.lower()
            found.reference_checksums[member.path] = (algo, digest)
            if member.checksum and member.checksum_algo == algo and member.checksum.lower() != digest:
                found.fail(CORRUPT, f"{relative}: its {algo} does not match integrity.json")


def _peek_json(directory: DirView, name: str) -> object:
    """JSON content without judging it (recognition must not fail a directory it does not claim)."""
    entry = directory.files.get(name)
    if entry is None or not entry.facts or entry.facts.get("kind") != "json" or "error" in entry.facts:
        return None
    return entry.facts.get("content")
