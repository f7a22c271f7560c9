"""Recognition of the committed real checkpoint trees, and of damaged copies of them.

Every tree is scanned with the host agent (``fleet.agent.scan_root``) exactly as a host would, so these
tests cover the facts the agent reads and the judgement the recognisers make from them. Damaged copies
are built in ``tmp_path`` from the committed trees (see demo/README.md for the layout).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from catalog.formats.base import COMPLETE, CORRUPT, PARTIAL, FileEntry, Found
from catalog.formats.common import is_note_inferred
from catalog.recognition import entries_from_agent_lines, recognize
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet.agent import scan_root
from tests.helpers.trees import EXPECTED, UNCLAIMED


def scan(root: Path, *, checksums: bool = False) -> tuple[list[Found], set[str]]:
    """Recognise a tree as the server would from the agent's inventory; also return every file path."""
    lines = list(scan_root(str(root), checksums=checksums, warn=lambda message: None))
    entries = entries_from_agent_lines(lines)
    return recognize(entries), {e.path for e in entries}


def copy_of(tmp_path: Path, root: str) -> Path:
    """A private copy of a committed root to damage (copy2 keeps the mtimes in write order)."""
    target = tmp_path / root
    shutil.copytree(TREES / root, target)
    return target


def at(found: list[Found], path: str) -> Found:
    matches = [x for x in found if x.path == path]
    assert len(matches) == 1, [(x.path, x.format) for x in found]
    return matches[0]


def truncate(path: Path, by: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - by])


def flip_a_byte(path: Path) -> None:
    """Silent corruption: same size, same mtime (else the DCP overwrite check would see the write)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def committed(request) -> tuple[str, list[Found], set[str]]:
    found, paths = scan(TREES / request.param)
    return request.param, found, paths


class TestCommittedTrees:
    def test_every_checkpoint_is_recognised_complete_with_its_format_and_step(self, committed):
        root, found, _ = committed
        assert [(x.path, x.format, x.step) for x in found] == EXPECTED[root]
        for copy in found:
            assert (copy.state, copy.temporary) == (COMPLETE, False), (copy.path, copy.reasons)
            notes = [r for r in copy.reasons if is_note_inferred(r)]
            assert [r for r in copy.reasons if r not in notes] == [], (copy.path, copy.reasons)
            # Every committed save's number of ranks comes from its own records, but Orbax's, which records none.
            assert bool(notes) == (copy.format == "orbax"), (copy.path, notes)

    def test_only_the_trackers_are_left_unclaimed_and_nothing_is_claimed_twice(self, committed):
        root, found, paths = committed
        owned = [p for x in found for p in x.files]
        assert len(owned) == len(set(owned))
        assert paths - set(owned) == UNCLAIMED[root]

    def test_the_sidecar_gives_run_team_importance_and_checksums_that_hold(self):
        found, _ = scan(TREES / "nvme-a", checksums=True)
        step200 = at(found, "llm/llama-tiny/step-200")
        assert (step200.run, step200.team, step200.importance) == ("llama-tiny", "llm", "milestone")
        assert step200.expected_files == 4
        base = TREES / "nvme-a"
        for path, (algo, digest) in step200.reference_checksums.items():
            assert algo == "sha256"
            assert hashlib.sha256((base / path).read_bytes()).hexdigest() == digest
        assert len(step200.reference_checksums) == 3
        assert at(found, "llm/llama-tiny/step-100").run is None

    def test_megatron_integrity_json_gives_checksums_that_hold(self):
        found, _ = scan(TREES / "pfs", checksums=True)
        iter300 = at(found, "llm/gpt-megatron/iter_0000300")
        assert iter300.state == COMPLETE
        assert set(iter300.reference_checksums) == {
            f"llm/gpt-megatron/iter_0000300/{name}"
            for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "common.pt", "metadata.json")
        }

    def test_the_dcp_manifest_counts_every_rank_file(self):
        found, _ = scan(TREES / "nvme-a")
        step100 = at(found, "llm/llama-tiny/step-100")
        assert step100.expected_files == 3
        assert step100.expected_bytes == sum((TREES / "nvme-a" / p).stat().st_size for p in step100.files)


class TestDamagedDCP:
    def test_a_deleted_rank_file_is_partial_and_named(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        (root / "llm/llama-tiny/step-100/__1_0.distcp").unlink()
        found, _ = scan(root)
        step100 = at(found, "llm/llama-tiny/step-100")
        assert step100.state == PARTIAL
        assert "rank file __1_0.distcp is missing (listed in .metadata)" in step100.reasons
        assert at(found, "llm/llama-tiny/step-200").state == COMPLETE

    def test_a_truncated_rank_file_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        truncate(root / "llm/llama-tiny/step-100/__0_0.distcp", 100)
        step100 = at(scan(root)[0], "llm/llama-tiny/step-100")
        assert step100.state == CORRUPT
        assert "__0_0.distcp is 100 bytes shorter than .metadata says" in step100.reasons

    def test_a_left_over_metadata_tmp_is_a_temporary_partial_copy(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        step = root / "llm/llama-tiny/step-100"
        (step / ".metadata").rename(step / ".metadata.tmp")
        copy = at(scan(root)[0], "llm/llama-tiny/step-100")
        assert (copy.temporary, copy.state) == (True, PARTIAL)
        assert "interrupted save: .metadata.tmp left behind" in copy.reasons

    def test_shards_rewritten_after_the_manifest_are_the_overwrite_trap(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        step = root / "llm/llama-tiny/step-100"
        later = (step / ".metadata").stat().st_mtime + 3600
        os.utime(step / "__1_0.distcp", (later, later))
        copy = at(scan(root)[0], "llm/llama-tiny/step-100")
        assert copy.state == PARTIAL
        assert ".metadata is older than __1_0.distcp (overwritten save?)" in copy.reasons

    def test_a_sidecar_checksum_catches_a_same_size_change(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        shard = root / "llm/llama-tiny/step-200/__0_0.distcp"
        flip_a_byte(shard)
        copy = at(scan(root, checksums=True)[0], "llm/llama-tiny/step-200")
        assert copy.state == CORRUPT
        assert "__0_0.distcp: its sha256 does not match ckptfleet.json" in copy.reasons
        # Without checksums the same damage is invisible: sizes and manifest still agree.
        assert at(scan(root)[0], "llm/llama-tiny/step-200").state == COMPLETE

    def test_a_zip_truncated_lightning_checkpoint_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        ckpt = root / "vision/resnet-tiny/epoch=0-step=100.ckpt"
        truncate(ckpt, ckpt.stat().st_size // 2)
        copy = at(scan(root)[0], "vision/resnet-tiny/epoch=0-step=100.ckpt")
        assert copy.state == CORRUPT
        assert any("truncated" in r for r in copy.reasons)

    def test_a_lightning_tmp_file_is_a_temporary_copy(self, tmp_path):
        root = copy_of(tmp_path, "nvme-a")
        run = root / "vision/resnet-tiny"
        shutil.copy(run / "epoch=1-step=200.ckpt", run / "epoch=2-step=300.ckpt.5f3a.tmp")
        copy = at(scan(root)[0], "vision/resnet-tiny/epoch=2-step=300.ckpt.5f3a.tmp")
        assert (copy.step, copy.temporary, copy.state) == (300, True, PARTIAL)


class TestDamagedHuggingFace:
    def test_a_truncated_shard_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        truncate(root / "nlp/gpt2-tiny/checkpoint-100/model-00002-of-00002.safetensors", 64)
        found, _ = scan(root)
        copy = at(found, "nlp/gpt2-tiny/checkpoint-100")
        assert copy.state == CORRUPT
        assert "model-00002-of-00002.safetensors is 64 bytes shorter than its header says" in copy.reasons
        assert at(found, "nlp/gpt2-tiny").state == COMPLETE

    def test_a_shard_listed_in_the_index_but_removed_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "nlp/gpt2-tiny/model-00001-of-00002.safetensors").unlink()
        found, _ = scan(root)
        final = at(found, "nlp/gpt2-tiny")
        assert final.state == PARTIAL
        assert "model-00001-of-00002.safetensors is missing (listed in model.safetensors.index.json)" in final.reasons
        assert at(found, "nlp/gpt2-tiny/checkpoint-100").state == COMPLETE

    def test_a_trainer_state_for_another_step_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        state_file = root / "nlp/gpt2-tiny/checkpoint-100/trainer_state.json"
        state = json.loads(state_file.read_text())
        state["global_step"] = 90
        state_file.write_text(json.dumps(state))
        copy = at(scan(root)[0], "nlp/gpt2-tiny/checkpoint-100")
        assert copy.state == CORRUPT
        assert "trainer_state.json says global_step 90, but the folder is checkpoint-100" in copy.reasons

    def test_a_save_that_died_before_trainer_state_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "nlp/gpt2-tiny/checkpoint-100/trainer_state.json").unlink()
        copy = at(scan(root)[0], "nlp/gpt2-tiny/checkpoint-100")
        assert copy.state == PARTIAL
        assert any("trainer_state.json is missing" in r for r in copy.reasons)

    def test_a_zip_truncated_optimizer_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        truncate(root / "nlp/gpt2-tiny/checkpoint-100/optimizer.pt", 200)
        copy = at(scan(root)[0], "nlp/gpt2-tiny/checkpoint-100")
        assert copy.state == CORRUPT
        assert any(r.startswith("optimizer.pt is truncated") for r in copy.reasons)


class TestDamagedDeepSpeed:
    def test_a_missing_data_parallel_rank_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "speech/ds-tiny/global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
        copy = at(scan(root)[0], "speech/ds-tiny/global_step200")
        assert copy.state == PARTIAL
        assert any("zero_pp_rank_0_mp_rank_00_optim_states.pt is missing" in r for r in copy.reasons)

    def test_a_missing_highest_rank_is_partial_by_the_world_size_its_model_states_record(self, tmp_path):
        # No gap between ranks shows the last one missing, and `latest` names the tag all the same: the
        # agent reads dp_world_size from the model states file, and the tag is partial whatever latest says.
        root = copy_of(tmp_path, "pfs")
        (root / "speech/ds-tiny/global_step200/zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
        assert (root / "speech/ds-tiny/latest").read_text().strip() == "global_step200"
        copy = at(scan(root)[0], "speech/ds-tiny/global_step200")
        assert copy.state == PARTIAL
        assert any("dp_world_size 2" in r for r in copy.reasons), copy.reasons
        lines = scan_root(str(root), warn=lambda message: None)
        states = next(x for x in lines if x["path"].endswith("global_step200/mp_rank_00_model_states.pt"))
        assert states["facts"]["deepspeed"] == {"dp_world_size": 2, "mp_world_size": 1}

    def test_a_tag_newer_than_latest_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "speech/ds-tiny/latest").write_text("global_step100")
        found, _ = scan(root)
        assert at(found, "speech/ds-tiny/global_step100").state == COMPLETE
        copy = at(found, "speech/ds-tiny/global_step200")
        assert copy.state == PARTIAL
        assert any("newer than `latest` (global_step100)" in r for r in copy.reasons)

    def test_a_zip_truncated_state_file_is_corrupt(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        truncate(root / "speech/ds-tiny/global_step100/mp_rank_00_model_states.pt", 500)
        copy = at(scan(root)[0], "speech/ds-tiny/global_step100")
        assert copy.state == CORRUPT
        assert any("mp_rank_00_model_states.pt is truncated" in r for r in copy.reasons)


class TestDamagedMegatron:
    def test_a_missing_tensor_parallel_rank_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        shutil.rmtree(root / "llm/gpt-megatron/iter_0000200/mp_rank_01")
        (root / "llm/gpt-megatron/iter_0000200/mp_rank_02").mkdir()
        shutil.copy(
            root / "llm/gpt-megatron/iter_0000200/mp_rank_00/model_optim_rng.pt",
            root / "llm/gpt-megatron/iter_0000200/mp_rank_02/model_optim_rng.pt",
        )
        copy = at(scan(root)[0], "llm/gpt-megatron/iter_0000200")
        assert copy.state == PARTIAL
        assert (
            "mp_rank_01/model_optim_rng.pt is missing (mp_rank_00/model_optim_rng.pt records "
            "tensor_model_parallel_size 2, pipeline_model_parallel_size 1)"
        ) in copy.reasons
        assert any("outside the grid its args record (mp_rank_02)" in r for r in copy.reasons), copy.reasons

    def test_a_missing_highest_rank_is_partial_by_the_parallel_sizes_its_args_record(self, tmp_path):
        # Without mp_rank_01 the save looks like a whole tensor-parallel-1 save, and the tracker names it all the
        # same: the args Megatron pickles into every model_optim_rng.pt say there were two.
        root = copy_of(tmp_path, "pfs")
        shutil.rmtree(root / "llm/gpt-megatron/iter_0000200/mp_rank_01")
        (root / "llm/gpt-megatron/latest_checkpointed_iteration.txt").write_text("200")
        copy = at(scan(root)[0], "llm/gpt-megatron/iter_0000200")
        assert copy.state == PARTIAL
        assert (
            "mp_rank_01/model_optim_rng.pt is missing (mp_rank_00/model_optim_rng.pt records "
            "tensor_model_parallel_size 2, pipeline_model_parallel_size 1)"
        ) in copy.reasons
        lines = scan_root(str(root), warn=lambda message: None)
        rank0 = next(x for x in lines if x["path"].endswith("iter_0000200/mp_rank_00/model_optim_rng.pt"))
        assert rank0["facts"]["megatron"] == {
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 1,
            "expert_model_parallel_size": 1,
        }

    def test_without_the_args_the_grid_is_inferred_and_the_verdict_says_so(self, tmp_path):
        # A bucket listing reads no facts: the same damaged save then looks whole, and the verdict says why.
        root = copy_of(tmp_path, "pfs")
        shutil.rmtree(root / "llm/gpt-megatron/iter_0000200/mp_rank_01")
        entries = [
            FileEntry(path=e.path, size=e.size, mtime=e.mtime)
            for e in entries_from_agent_lines(list(scan_root(str(root), warn=lambda message: None)))
        ]
        copy = at(recognize(entries), "llm/gpt-megatron/iter_0000200")
        assert copy.state == COMPLETE
        assert [r for r in copy.reasons if is_note_inferred(r)] == [
            "the tensor rank grid (1) is inferred from the files present (no model_optim_rng.pt's args were read): "
            "a save missing its highest rank would look complete"
        ]

    def test_torch_dist_without_metadata_json_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "llm/gpt-megatron/iter_0000300/metadata.json").unlink()
        copy = at(scan(root)[0], "llm/gpt-megatron/iter_0000300")
        assert (copy.format, copy.state) == ("megatron_dist", PARTIAL)
        assert "metadata.json is missing (Megatron writes it after .metadata)" in copy.reasons

    def test_integrity_json_catches_a_changed_rank_file(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        flip_a_byte(root / "llm/gpt-megatron/iter_0000300/__1_0.distcp")
        copy = at(scan(root, checksums=True)[0], "llm/gpt-megatron/iter_0000300")
        assert copy.state == CORRUPT
        assert "__1_0.distcp: its sha256 does not match integrity.json" in copy.reasons

    def test_the_tracker_behind_a_torch_dist_save_is_only_noted(self, tmp_path):
        root = copy_of(tmp_path, "pfs")
        (root / "llm/gpt-megatron/latest_checkpointed_iteration.txt").write_text("200")
        copy = at(scan(root)[0], "llm/gpt-megatron/iter_0000300")
        assert copy.state == COMPLETE
        assert any("newer than latest_checkpointed_iteration.txt (200)" in r for r in copy.reasons)


class TestDamagedOrbax:
    def test_an_unrenamed_tmp_directory_is_a_temporary_partial_copy(self, tmp_path):
        root = copy_of(tmp_path, "bucket")
        run = root / "vision/vit-jax"
        (run / "500").rename(run / "500.orbax-checkpoint-tmp-1793491700")
        copy = at(scan(root)[0], "vision/vit-jax/500.orbax-checkpoint-tmp-1793491700")
        assert (copy.format, copy.step, copy.temporary, copy.state) == ("orbax", 500, True, PARTIAL)

    def test_a_missing_item_is_partial(self, tmp_path):
        root = copy_of(tmp_path, "bucket")
        shutil.rmtree(root / "vision/vit-jax/400/state")
        copy = at(scan(root)[0], "vision/vit-jax/400")
        assert copy.state == PARTIAL
        assert "item state/ is missing (listed in _CHECKPOINT_METADATA)" in copy.reasons
