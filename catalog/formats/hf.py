"""Hugging Face: sharded safetensors (or ``.bin``) with an index, and Trainer ``checkpoint-N/`` folders.

Sharded weights: ``model-{i:05d}-of-{n:05d}.safetensors`` plus ``model.safetensors.index.json``
(``{"metadata": {"total_size": ...}, "weight_map": {tensor: shard}}``), written after the shards and not
atomically. Variants: ``model.fp16-00001-of-00002.safetensors``, ``pytorch_model-*.bin`` with
``pytorch_model.bin.index.json``. A model directory also counts when it has ``config.json`` next to an
unsharded ``model.safetensors`` / ``pytorch_model.bin``.

Judgement: every shard the index names exists (else partial); every ``-i-of-n`` series covers 1..n (else
partial); shards without their index -> partial; each safetensors file's size equals what its header
says (else corrupt); a torch ``.bin`` is a whole zip (else corrupt).

Trainer ``checkpoint-N/`` (transformers Trainer._save_checkpoint): config.json, the weights as above
(or ``pytorch_model_fsdp_0/`` DCP, or DeepSpeed ``global_stepN/``), training_args.bin, optimizer.pt,
scheduler.pt, [scaler.pt], ``rng_state.pth`` or ``rng_state_{i}.pth``, and ``trainer_state.json``
written last. There is no commit marker, so: ``trainer_state.json`` missing -> partial; its
``global_step`` differing from N -> corrupt (it belongs to another save); rng states not contiguous, or
``rng_state_0.pth`` alone -> partial, and a note says the number of processes is inferred from the files
present (nothing records it); no weights at all -> partial.
"""

from __future__ import annotations

import re

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import (
    check_member_files,
    check_safetensors,
    check_torch_file,
    contiguous_gaps,
    facts_of,
    json_content,
    new_found,
    note_inferred,
    ranks_list,
    size_words,
)
from catalog.formats.dcp import check_dcp, is_dcp_dir
from catalog.formats.deepspeed import check_deepspeed_tag, is_deepspeed_dir

# model-00001-of-00002.safetensors, model.fp16-00001-of-00002.safetensors, pytorch_model-00001-of-00003.bin
_SHARD = re.compile(r"^(?P<prefix>.+?)-(?P<i>\d{5})-of-(?P<n>\d{5})\.(?P<ext>safetensors|bin)$")
# model.safetensors.index.json, pytorch_model.bin.index.json, model.safetensors.index.fp16.json
_INDEX = re.compile(r"^(?P<base>.+)\.(?P<ext>safetensors|bin)\.index(?:\.[^.]+)?\.json$")
_UNSHARDED = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
_TRAINER_DIR = re.compile(r"^checkpoint-(\d+)$")
_RNG = re.compile(r"^rng_state(?:_(\d+))?\.pth$")
_TRAINER_FILES = ("trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt")


def is_hf_model_dir(directory: DirView) -> bool:
    files = directory.files
    if any(_INDEX.match(name) or _SHARD.match(name) for name in files):
        return True
    return "config.json" in files and any(name in files for name in _UNSHARDED)


def _index_name(prefix: str, ext: str) -> str:
    """The index a shard series belongs to: model.fp16 -> model.safetensors.index.fp16.json."""
    base, _, variant = prefix.partition(".")
    return f"{base}.{ext}.index.{variant}.json" if variant else f"{base}.{ext}.index.json"


def check_hf_weights(found: Found, directory: DirView, where: str = "") -> bool:
    """Judge the HF weights directly in ``directory``; returns whether there are any weights at all."""
    files = directory.files
    missing: set[str] = set()
    listed: set[str] = set()
    indexes = sorted(name for name in files if _INDEX.match(name))
    for index in indexes:
        facts = facts_of(files[index], "hf_index")
        if facts is None:
            continue
        if "error" in facts:
            found.fail(CORRUPT, f"{where}{index} cannot be read: {facts['error']}")
            continue
        shards = [s for s in facts.get("shards") or [] if isinstance(s, str)]
        listed.update(shards)
        present = 0
        for shard in shards:
            if shard not in files:
                missing.add(shard)
                found.fail(PARTIAL, f"{where}{shard} is missing (listed in {where}{index})")
            else:
                present += files[shard].size
        total = facts.get("total_size")
        if isinstance(total, int) and not (set(shards) & missing) and 0 < present < total:
            found.fail(
                CORRUPT,
                f"the shards hold {size_words(present)} but {where}{index} says the tensors alone take "
                f"{size_words(total)}",
            )
        found.expected_files = (found.expected_files or 0) + len(shards) + 1

    # Every -i-of-n series must be whole, and needs its index (written after the shards).
    series: dict[tuple[str, str], dict[int, set[int]]] = {}
    for name in files:
        match = _SHARD.match(name)
        if match:
            key = (match["prefix"], match["ext"])
            series.setdefault(key, {}).setdefault(int(match["n"]), set()).add(int(match["i"]))
    for (prefix, ext), by_total in sorted(series.items()):
        if len(by_total) > 1:
            found.fail(
                CORRUPT,
                f"{where}{prefix}-*.{ext} shards of different saves are mixed "
                f"(-of-{', -of-'.join(f'{n:05d}' for n in sorted(by_total))})",
            )
        for n, present in sorted(by_total.items()):
            for i in range(1, n + 1):
                name = f"{prefix}-{i:05d}-of-{n:05d}.{ext}"
                if i not in present and name not in missing:
                    missing.add(name)
                    found.fail(PARTIAL, f"{where}{name} is missing ({len(present)} of {n} shards present)")
        index = _index_name(prefix, ext)
        if index not in files and max(by_total) > 1:
            found.fail(PARTIAL, f"{where}{index} is missing (it is written after the shards)")
    stray = sorted(name for name in files if _SHARD.match(name) and listed and name not in listed)
    if stray:
        found.reasons.append(f"{where}{stray[0]} is not listed in the index (left over from an earlier save?)")

    weights = False
    for name, entry in sorted(files.items()):
        if name.endswith(".safetensors"):
            weights = True
            check_safetensors(found, entry, where + name)
        elif name.endswith(".bin") and (_SHARD.match(name) or name in _UNSHARDED):
            weights = True
            check_torch_file(found, entry, where + name)
    return weights or bool(indexes)


class HFSafetensorsFormat(CheckpointFormat):
    """A Hugging Face model directory (sharded with an index, or config.json + unsharded weights).

    It owns only the directory's own files: a Trainer's ``output_dir`` holds the final model *and* the
    ``checkpoint-N/`` folders, which are checkpoints of their own.
    """

    name = "hf_safetensors"
    label = "Hugging Face safetensors"
    priority = 35

    def claim(self, directory: DirView) -> list[Found]:
        if not is_hf_model_dir(directory):
            return []
        found = new_found(directory, self.name, subtree=False)
        check_hf_weights(found, directory)
        config = json_content(found, directory.files.get("config.json"), "config.json")
        if config is not None and not isinstance(config, dict):
            found.fail(CORRUPT, "config.json is not a JSON object")
        return [found]


class HFTrainerFormat(CheckpointFormat):
    """A transformers Trainer ``checkpoint-N/`` folder (weights, optimizer, scheduler, RNG, state)."""

    name = "hf_trainer"
    label = "Hugging Face Trainer"
    priority = 30

    def claim(self, directory: DirView) -> list[Found]:
        match = _TRAINER_DIR.match(directory.name)
        if not match or not self._looks_like_trainer(directory):
            return []
        step = int(match.group(1))
        found = new_found(directory, self.name)
        files = directory.files

        state = files.get("trainer_state.json")
        if state is None:
            found.fail(PARTIAL, "trainer_state.json is missing (the Trainer writes it last: the save did not finish)")
        else:
            facts = facts_of(state, "trainer_state")
            if facts is not None and "error" in facts:
                found.fail(CORRUPT, f"trainer_state.json cannot be read: {facts['error']}")
            elif facts is not None and facts.get("global_step") != step:
                found.fail(
                    CORRUPT,
                    f"trainer_state.json says global_step {facts.get('global_step')}, "
                    f"but the folder is checkpoint-{step}",
                )

        weights = check_hf_weights(found, directory)
        for name, sub in sorted(directory.dirs.items()):
            where = f"{name}/"
            if is_dcp_dir(sub):  # FSDP: pytorch_model_fsdp_0/, optimizer_0/
                weights = weights or name.startswith("pytorch_model_fsdp")
                check_dcp(found, sub, where)
            elif is_deepspeed_dir(sub):  # DeepSpeed under Trainer: checkpoint-N/global_stepN/ + latest
                weights = True
                check_deepspeed_tag(found, sub, where, tracker_dir=directory)
            else:
                check_member_files(found, sub, where)
        if not weights:
            found.fail(PARTIAL, "no model weights (model*.safetensors, pytorch_model*.bin, FSDP or DeepSpeed state)")

        self._check_rng_states(found, files)

        for name in ("optimizer.pt", "scheduler.pt", "scaler.pt", "training_args.bin"):
            if name in files:
                check_torch_file(found, files[name], name)
        for name, entry in sorted(files.items()):
            if _RNG.match(name):
                check_torch_file(found, entry, name)
        json_content(found, files.get("config.json"), "config.json")
        found.step = step
        return [found]

    @staticmethod
    def _check_rng_states(found: Found, files: dict) -> None:
        """One RNG file per process: ``rng_state.pth`` when the world size is 1, else ``rng_state_{process_index}
        .pth`` from every process (transformers Trainer._save_rng_state), so ``rng_state_0.pth`` alone means a
        larger world whose other files are missing. Nothing in the folder records the world size itself (it is
        not a field of TrainingArguments or TrainerState), so beyond that the count is inferred from the files."""
        ranks = {int(m.group(1)) for name in files if (m := _RNG.match(name)) and m.group(1) is not None}
        if not ranks:
            return
        for rank in contiguous_gaps(ranks):
            found.fail(
                PARTIAL,
                f"rng_state_{rank}.pth is missing (rng states of processes {ranks_list(ranks)} exist)",
            )
        if ranks == {0}:
            found.fail(
                PARTIAL,
                "rng_state_1.pth is missing: the Trainer writes rng_state_0.pth only when it runs more than one "
                "process (one process writes rng_state.pth)",
            )
        note_inferred(
            found,
            f"the number of processes ({max(ranks) + 1:,})",
            "the Trainer records it nowhere but in the rng_state_N.pth files",
        )

    @staticmethod
    def _looks_like_trainer(directory: DirView) -> bool:
        """A plain DCP save in a folder named checkpoint-N is left to the DCP recogniser."""
        files = directory.files
        if any(name in files for name in _TRAINER_FILES) or any(_RNG.match(name) for name in files):
            return True
        return is_hf_model_dir(directory) or any(
            name.startswith("pytorch_model_fsdp") or is_deepspeed_dir(sub) for name, sub in directory.dirs.items()
        )
