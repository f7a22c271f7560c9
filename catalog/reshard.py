"""Reshard compatibility: the layout a checkpoint copy was saved with, and whether it loads on another GPU count.

The layout comes from the copy's own files and the facts the agent read from them, never from a guess:

- **PyTorch DCP** (and Megatron-Core ``torch_dist``, which is DCP underneath): one ``__<rank>_<n>.distcp`` per
  writing rank. DCP loads onto any number of ranks: each reads the slices its new sharding needs
  (``torch.distributed.checkpoint.load``), and Megatron-Core's ``dist_checkpointing`` changes TP/PP on load.
- **Hugging Face** sharded safetensors and Trainer folders hold whole tensors (or an FSDP state in DCP): they load
  on any count. A Trainer folder that holds a DeepSpeed ``global_step*`` follows DeepSpeed's rule.
- **Orbax** restores onto any mesh given the target sharding.
- **DeepSpeed** ZeRO: ``mp_rank_XX_model_states.pt`` per model-parallel rank and
  ``zero_pp_rank_D_mp_rank_XX_optim_states.pt`` per data-parallel rank; the model states record
  ``dp_world_size`` and ``mp_world_size``, and ``load_checkpoint`` reads exactly that many optimizer files. Another
  count needs DeepSpeed's ``ds_to_universal.py`` (then ``"checkpoint": {"load_universal": true}``), or
  ``zero_to_fp32.py`` for the weights alone, without optimizer state.
- **Megatron-LM legacy**: one ``mp_rank_XX[_YYY]`` folder per tensor (XX) and pipeline (YYY) rank, as many as the
  parallel sizes in the args every ``model_optim_rng.pt`` records say (else as the folders present say). Another
  TP or PP size needs Megatron-LM's ``tools/checkpoint/convert.py`` (``--target-tensor-parallel-size``,
  ``--target-pipeline-parallel-size``); a distributed optimizer's ``distrib_optim.pt`` is also per data-parallel rank.
- **A single file** (``torch.save``, Lightning ``.ckpt``) holds whole tensors: any count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog.models import CheckpointCopy, ShardFile

_DISTCP = re.compile(r"(?:^|/)__(\d+)_\d+\.distcp$")
_DS_MODEL = re.compile(r"(?:^|/)mp_rank_(\d+)_model_states\.pt$")
_DS_OPTIM = re.compile(r"(?:^|/)(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt$")
_MEGATRON_RANK = re.compile(r"(?:^|/)mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?/")
FILES_READ = 100_000  # a layout is read from at most this many file names


class Reshard:
    FREE = "free"  # loads on any number of GPUs
    CONVERSION = "conversion"  # another count needs a conversion tool
    UNKNOWN = "unknown"

    LABELS = {
        FREE: "Loads on any number of GPUs",
        CONVERSION: "Same layout only, or convert first",
        UNKNOWN: "Layout not known",
    }


@dataclass
class Layout:
    """What a copy was saved with, and what loading it elsewhere takes."""

    world_size: int | None
    parts: dict  # e.g. {"tensor parallel": 2, "pipeline parallel": 2, "data parallel": 4}
    reshard: str
    reason: str
    tool: str = ""
    source: str = ""  # which files say so

    @property
    def label(self) -> str:
        return Reshard.LABELS[self.reshard]

    @property
    def described(self) -> str:
        bits = " \u00d7 ".join(f"{k} {v}" for k, v in self.parts.items())
        if self.world_size:
            return f"saved by {self.world_size:,} rank{'s' if self.world_size != 1 else ''}" + (
                f" ({bits})" if bits else ""
            )
        return bits or "saved layout not recorded"

    def loads_on(self, gpus: int) -> tuple[bool, str]:
        """Whether the copy loads as it is on ``gpus`` GPUs, and what it takes otherwise."""
        if self.reshard == Reshard.FREE:
            return True, self.reason
        if self.reshard == Reshard.CONVERSION and self.world_size:
            if gpus == self.world_size:
                return True, f"the same {gpus:,} ranks it was saved by"
            return False, f"saved by {self.world_size:,} ranks; for {gpus:,} GPUs {self.tool}"
        return False, self.reason

    def as_dict(self) -> dict:
        return {
            "world_size": self.world_size,
            "parts": self.parts,
            "reshard": self.reshard,
            "label": self.label,
            "reason": self.reason,
            "tool": self.tool or None,
            "source": self.source or None,
        }


NEEDS_FILES = ("pytorch_dcp", "megatron_dist", "deepspeed", "megatron", "hf_trainer")


def _relative(copy: CheckpointCopy, rows) -> list[tuple[str, dict | None]]:
    prefix = copy.path.rstrip("/") + "/"
    return [(p[len(prefix) :] if p.startswith(prefix) else p, facts) for p, facts in rows]


def _read_files(copy: CheckpointCopy) -> list[tuple[str, dict | None]]:
    rows = ShardFile.objects.filter(copy=copy, gone_at__isnull=True).values_list("path", "facts")[:FILES_READ]
    return _relative(copy, rows)


def layouts_of(copies) -> dict[int, Layout]:
    """``layout_of`` for many copies in one query of their files (a page of a checkpoint's copies)."""
    copies = list(copies)
    wanted = [c.pk for c in copies if c.format in NEEDS_FILES]
    by_copy: dict[int, list] = {pk: [] for pk in wanted}
    if wanted:
        rows = ShardFile.objects.filter(copy_id__in=wanted, gone_at__isnull=True).values_list(
            "copy_id", "path", "facts"
        )[: FILES_READ * len(wanted)]
        for copy_id, path, facts in rows:
            by_copy[copy_id].append((path, facts))
    return {c.pk: layout_of(c, files=_relative(c, by_copy.get(c.pk, []))) for c in copies}


def _dcp(files, reason: str) -> Layout:
    ranks = {int(m.group(1)) for p, _ in files if (m := _DISTCP.search(p))}
    return Layout(
        world_size=(max(ranks) + 1) if ranks else None,
        parts={},
        reshard=Reshard.FREE,
        reason=reason,
        source="__<rank>_<n>.distcp files" if ranks else "",
    )


def _deepspeed(files) -> Layout:
    recorded: dict = {}
    for path, facts in files:
        if _DS_MODEL.search(path) and isinstance(facts, dict) and isinstance(facts.get("deepspeed"), dict):
            recorded = facts["deepspeed"]
            break
    mp = recorded.get("mp_world_size") or len({m.group(1) for p, _ in files if (m := _DS_MODEL.search(p))}) or None
    dp = recorded.get("dp_world_size") or len({m.group(1) for p, _ in files if (m := _DS_OPTIM.search(p))}) or None
    parts = {k: v for k, v in (("model parallel", mp), ("data parallel", dp)) if v}
    world = (mp or 1) * dp if dp else None
    return Layout(
        world_size=world,
        parts=parts,
        reshard=Reshard.CONVERSION,
        reason="DeepSpeed's load_checkpoint reads exactly the optimizer partitions it was saved with",
        tool=(
            "convert it with DeepSpeed's ds_to_universal.py and load with "
            '"checkpoint": {"load_universal": true}; or zero_to_fp32.py for the weights alone (no optimizer state)'
        ),
        source="the model states' recorded world sizes" if recorded else "the file names",
    )


def _megatron(files) -> Layout:
    """The parallel sizes the save's args record (the agent's ``"megatron"`` facts of a model_optim_rng.pt), else the
    mp_rank_XX_YYY folders present: a save missing its highest rank must not read as a smaller layout."""
    for path, facts in files:
        sizes = facts.get("megatron") if isinstance(facts, dict) and path.endswith("model_optim_rng.pt") else None
        if isinstance(sizes, dict) and sizes.get("tensor_model_parallel_size"):
            parts = {
                "tensor parallel": sizes["tensor_model_parallel_size"],
                "pipeline parallel": sizes.get("pipeline_model_parallel_size") or 1,
            }
            if (sizes.get("expert_model_parallel_size") or 1) > 1:
                parts["expert parallel"] = sizes["expert_model_parallel_size"]
            return _megatron_layout(parts, "the parallel sizes its args record")
    tp, pp = set(), set()
    for path, _ in files:
        m = _MEGATRON_RANK.search(path)
        if m:
            tp.add(m.group(1))
            if m.group(2):
                pp.add(m.group(2))
    parts = {"tensor parallel": len(tp) or 1, "pipeline parallel": len(pp) or 1}
    return _megatron_layout(parts, "the mp_rank_XX_YYY folders")


def _megatron_layout(parts: dict[str, int], source: str) -> Layout:
    return Layout(
        world_size=None,
        parts=parts,
        reshard=Reshard.CONVERSION,
        reason="legacy Megatron-LM saves one folder per tensor- and pipeline-parallel rank",
        tool=(
            "convert it with Megatron-LM's tools/checkpoint/convert.py "
            "(--target-tensor-parallel-size, --target-pipeline-parallel-size)"
        ),
        source=source,
    )


def _deepspeed_inside(files) -> bool:
    return any(_DS_OPTIM.search(p) or _DS_MODEL.search(p) for p, _ in files)


def layout_of(copy: CheckpointCopy, *, files: list | None = None) -> Layout:
    """The layout ``copy`` was saved with and whether it reshards, from its own files (``files``: already read)."""
    fmt = copy.format

    def _files(c: CheckpointCopy) -> list[tuple[str, dict | None]]:
        return files if files is not None else _read_files(c)

    if fmt in ("pytorch_dcp", "megatron_dist"):
        files = _files(copy)
        why = (
            "Megatron-Core dist_checkpointing (torch_dist) changes tensor and pipeline parallel sizes on load"
            if fmt == "megatron_dist"
            else "torch.distributed.checkpoint loads onto any number of ranks: each reads the slices it needs"
        )
        return _dcp(files, why)
    if fmt == "deepspeed":
        return _deepspeed(_files(copy))
    if fmt == "megatron":
        return _megatron(_files(copy))
    if fmt == "hf_trainer":
        files = _files(copy)
        if _deepspeed_inside(files):
            return _deepspeed(files)
        fsdp = any("fsdp" in p and _DISTCP.search(p) for p, _ in files)
        return Layout(
            world_size=None,
            parts={},
            reshard=Reshard.FREE,
            reason=(
                "the Trainer's FSDP state is a DCP checkpoint: it loads onto any number of ranks"
                if fsdp
                else "whole tensors (safetensors or torch.save): any number of GPUs"
            ),
        )
    if fmt == "hf_safetensors":
        return Layout(None, {}, Reshard.FREE, "sharded safetensors hold whole tensors: any number of GPUs")
    if fmt == "orbax":
        return Layout(None, {}, Reshard.FREE, "Orbax restores onto any mesh given the target sharding")
    if fmt == "single_file":
        return Layout(None, {}, Reshard.FREE, "one file of whole tensors: load it, then shard it as you like")
    return Layout(None, {}, Reshard.UNKNOWN, f"no layout rule for the {fmt or 'unknown'} format")
