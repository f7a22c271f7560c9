"""DeepSpeed checkpoints: ``save_dir/latest`` + ``save_dir/global_stepN/`` (deepspeed/runtime/engine.py).

A tag directory holds ``mp_rank_{mp:02d}_model_states.pt`` (ZeRO-3: ``zero_pp_rank_{dp}_mp_rank_{mp:02d}
_model_states.pt`` per data-parallel rank), one ``[bf16_]zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt``
per data-parallel rank (older releases wrote ``..._mp_rank_{mp:02d}optim_states.pt``), and for MoE
``[layer_{L}_]expert_{E}_mp_rank_{mp:02d}_model_states.pt`` and ``expp_rank_{r}_mp_rank_{mp:02d}_optim_states.pt``.
Rank 0 writes ``latest`` (text: the tag) after every rank's files; DeepSpeed writes no manifest and no
temporary files.

The model states record the world the tag was saved by: ``_common_checkpoint_state`` stores
``dp_world_size`` (the size of the ZeRO optimizer's data-parallel group, ``seq_dp_world_size``) and
``mp_world_size``, and the loader reads exactly ``dp_world_size`` optimizer files per mp rank
(``_get_mp_rank_zero_checkpoint_names``). The agent reports them as ``"deepspeed": {"dp_world_size": n,
"mp_world_size": m}`` in the torch_file facts of a ``*model_states.pt`` file.

Judgement:

- with those counts: every mp rank 0..m-1 needs its model states, and, when the tag has ZeRO optimizer
  files at all (ZeRO 1-3, and bf16 at stage 0; fp16/fp32 stage 0 keeps the optimizer in the model states
  and writes none), every data-parallel rank 0..n-1 its optimizer file for every mp rank -> otherwise
  partial, whatever ``latest`` says; model states files that record different counts -> corrupt (files of
  two saves mixed);
- always (the only rules without the counts, e.g. in a bucket listing): mp ranks and, per mp rank,
  data-parallel optimizer partitions must be contiguous from 0, every mp rank needs its model states
  -> otherwise partial;
- every file must be a whole torch.save zip -> otherwise corrupt;
- a tag newer than the parent's ``latest`` -> partial: without a manifest, ``latest`` is the only sign
  that every rank finished.

Without the counts a missing *highest* data-parallel rank leaves no gap in the numbers: the verdict notes that the
counts are inferred from the files present (``common.note_inferred``). When another tag
in the same ``save_dir`` has more partitions we say so, but only as a note: a job restarted with fewer
ranks produces the same picture, and calling good checkpoints partial could get them deleted.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, FileEntry, Found
from catalog.formats.common import (
    check_torch_file,
    contiguous_gaps,
    facts_of,
    new_found,
    note_inferred,
    plural,
    ranks_list,
    step_from_name,
    text_content,
)

_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_ZERO3_MODEL = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")
_OPTIM = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt$")
_EXPERT = re.compile(r"^(?:layer_\d+_)?expert_\d+_mp_rank_(\d+)_model_states\.pt$")
_EXPERT_OPTIM = re.compile(r"^expp_rank_\d+_mp_rank_(\d+)_optim_states\.pt$")
_ANY = (_MODEL, _ZERO3_MODEL, _OPTIM, _EXPERT, _EXPERT_OPTIM)

TRACKER = "latest"


def is_deepspeed_dir(directory: DirView) -> bool:
    # Every DeepSpeed name ends in "_states.pt": a cheap test first (this runs on every directory).
    return any(name.endswith("_states.pt") and any(p.match(name) for p in _ANY) for name in directory.files)


def _partitions(directory: DirView) -> dict[int, set[int]]:
    """Data-parallel optimizer partitions present, per mp rank."""
    parts: dict[int, set[int]] = {}
    for name in directory.files:
        match = _OPTIM.match(name)
        if match:
            parts.setdefault(int(match.group(3)), set()).add(int(match.group(2)))
    return parts


# The largest partition count per mp rank among the tags of a save_dir (and which tag has it), computed
# once per save_dir: re-scanning the siblings for each tag would be quadratic in the number of tags.
_sibling_cache: weakref.WeakKeyDictionary[DirView, dict[int, tuple[int, str]]] = weakref.WeakKeyDictionary()


def _most_partitions(parent: DirView) -> dict[int, tuple[int, str]]:
    cached = _sibling_cache.get(parent)
    if cached is None:
        cached = {}
        for name, sub in sorted(parent.dirs.items()):
            for mp, dps in _partitions(sub).items():
                if mp not in cached or max(dps) + 1 > cached[mp][0]:
                    cached[mp] = (max(dps) + 1, name)
        _sibling_cache[parent] = cached
    return cached


@dataclass(frozen=True)
class WorldSize:
    """The data- and model-parallel world sizes a tag's model states record, and the file that says so."""

    dp: int
    mp: int
    source: str

    def says(self, what: str) -> str:
        return f"{self.source} records {what}_world_size {self.dp if what == 'dp' else self.mp}"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def world_size(found: Found, files: dict[str, FileEntry], where: str = "") -> WorldSize | None:
    """The world size the tag's model states record; None when no file says (or they disagree: corrupt)."""
    seen: dict[tuple[int, int], list[str]] = {}
    for name, entry in sorted(files.items()):
        if not name.endswith("model_states.pt"):
            continue
        facts = facts_of(entry, "torch_file")
        recorded = facts.get("deepspeed") if facts is not None else None
        if not isinstance(recorded, dict):
            continue
        dp, mp = _count(recorded.get("dp_world_size")), _count(recorded.get("mp_world_size"))
        if dp is not None and mp is not None:
            seen.setdefault((dp, mp), []).append(name)
    if len(seen) > 1:
        found.fail(
            CORRUPT,
            "the model states record different world sizes (files of two saves mixed?): "
            + "; ".join(f"{where}{names[0]} dp {dp} x mp {mp}" for (dp, mp), names in sorted(seen.items())),
        )
        return None
    for (dp, mp), names in seen.items():
        return WorldSize(dp=dp, mp=mp, source=where + names[0])
    return None


def check_deepspeed_tag(found: Found, directory: DirView, where: str = "", tracker_dir: DirView | None = None) -> None:
    """Judge one DeepSpeed tag directory; ``tracker_dir`` is where ``latest`` lives (its parent)."""
    files = directory.files
    model_mps: set[int] = set()
    zero3: dict[int, set[int]] = {}
    all_mps: set[int] = set()
    for name in files:
        if m := _MODEL.match(name):
            model_mps.add(int(m.group(1)))
            all_mps.add(int(m.group(1)))
        elif m := _ZERO3_MODEL.match(name):
            zero3.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
            all_mps.add(int(m.group(2)))
        elif m := (_OPTIM.match(name) or _EXPERT.match(name) or _EXPERT_OPTIM.match(name)):
            all_mps.add(int(m.groups()[-1]))
    partitions = _partitions(directory)
    bf16 = any(name.startswith("bf16_zero_pp_rank_") for name in files)
    optim_prefix = "bf16_zero_pp_rank" if bf16 else "zero_pp_rank"
    world = world_size(found, files, where)

    for mp in contiguous_gaps(all_mps):
        found.fail(PARTIAL, f"no files of model-parallel rank {mp:02d} (ranks {ranks_list(all_mps)} are there)")
    expected_mps = set(all_mps)
    if world is not None:
        expected_mps.update(range(world.mp))
    for mp in sorted(expected_mps):
        if mp not in model_mps and mp not in zero3:
            because = f" ({world.says('mp')})" if world is not None and mp not in all_mps else ""
            found.fail(PARTIAL, f"{where}mp_rank_{mp:02d}_model_states.pt is missing{because}")
        present = partitions.get(mp, set())
        if world is not None and partitions:
            # The loader opens exactly dp_world_size optimizer files per mp rank: each one must be there.
            missing = sorted(set(range(world.dp)) - present | set(contiguous_gaps(present)))
            if missing:
                found.fail(PARTIAL, _missing_optim(where, optim_prefix, mp, missing, f"{world.says('dp')}"))
        else:
            for dp in contiguous_gaps(present):
                found.fail(
                    PARTIAL,
                    f"{where}{optim_prefix}_{dp}_mp_rank_{mp:02d}_optim_states.pt is missing "
                    f"(data-parallel ranks {ranks_list(present)} are there)",
                )
        if mp in zero3:
            # ZeRO-3: every data-parallel rank writes its own model states too.
            for dp in range(max(zero3[mp] | present) + 1):
                if dp not in zero3[mp]:
                    found.fail(PARTIAL, f"{where}zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt is missing")
    counts = {mp: max(dps) + 1 for mp, dps in partitions.items()}
    if len(set(counts.values())) > 1:
        found.fail(
            PARTIAL,
            "model-parallel ranks disagree on the number of optimizer partitions: "
            + ", ".join(f"mp {mp:02d} has {n}" for mp, n in sorted(counts.items())),
        )

    for name, entry in sorted(files.items()):
        if name.endswith(".pt"):
            check_torch_file(found, entry, where + name)

    if world is None:
        note_inferred(
            found,
            "the number of model- and data-parallel ranks",
            f"no {where}*model_states.pt recorded dp_world_size and mp_world_size that was read",
        )
    if directory.parent is not None and counts and world is None:
        for mp, (n, sibling) in sorted(_most_partitions(directory.parent).items()):
            if n > counts.get(mp, 0):
                found.reasons.append(
                    f"only {plural(counts.get(mp, 0), 'optimizer partition')} for mp rank {mp:02d}, but "
                    f"{sibling} beside it has {n}: a higher data-parallel rank's file may be missing "
                    "(or the job was restarted with fewer ranks)"
                )
                break

    if tracker_dir is not None:
        check_tracker(found, directory.name, tracker_dir)


def _missing_optim(where: str, prefix: str, mp: int, missing: list[int], because: str) -> str:
    if len(missing) == 1:
        return f"{where}{prefix}_{missing[0]}_mp_rank_{mp:02d}_optim_states.pt is missing ({because})"
    return (
        f"the optimizer states of data-parallel ranks {ranks_list(missing)} are missing for mp rank {mp:02d} "
        f"({where}{prefix}_N_mp_rank_{mp:02d}_optim_states.pt; {because})"
    )


def check_tracker(found: Found, tag: str, tracker_dir: DirView) -> None:
    """A tag newer than ``latest``: rank 0 had not yet declared the save finished."""
    latest = text_content(tracker_dir.files.get(TRACKER))
    if latest is None:
        return
    tag_step, latest_step = step_from_name(tag), step_from_name(latest)
    if tag_step is not None and latest_step is not None and tag_step > latest_step:
        found.fail(
            PARTIAL,
            f"{tag} is newer than `latest` ({latest}): DeepSpeed updates `latest` only after every rank "
            "saved, so this save may not have finished",
        )


class DeepSpeedFormat(CheckpointFormat):
    """A DeepSpeed tag directory (``global_stepN/`` or a custom tag) with model/optimizer state files."""

    name = "deepspeed"
    label = "DeepSpeed"
    priority = 20

    def claim(self, directory: DirView) -> list[Found]:
        if not is_deepspeed_dir(directory):
            return []
        found = new_found(directory, self.name)
        check_deepspeed_tag(found, directory, tracker_dir=directory.parent)
        return [found]
