"""Unit tests of every checkpoint format and of the recognition engine, from hand-built FileEntry lists.

Facts are written the way the host agent reports them (docs/wire-format.md); see
test_recognition_fixtures.py for the same rules applied to real trees scanned by the agent.
"""

from __future__ import annotations

import pytest

from catalog.formats import FORMAT_LABELS, FORMATS
from catalog.formats.base import COMPLETE, CORRUPT, PARTIAL, CheckpointFormat, DirView, FileEntry, Found
from catalog.formats.common import is_note_inferred, step_from_name
from catalog.recognition import build_tree, entries_from_agent_lines, recognize

ZIP_OK = {"kind": "torch_file", "container": "zip", "complete": True}
ZIP_CUT = {"kind": "torch_file", "container": "zip", "complete": False}


def f(path: str, size: int = 100, facts: dict | None = None, mtime: float = 1000.0, **kw) -> FileEntry:
    return FileEntry(path=path, size=size, mtime=mtime, facts=facts, **kw)


def dcp_meta(files: dict[str, int]) -> dict:
    return {"kind": "dcp_metadata", "files": files}


def js(content: object) -> dict:
    return {"kind": "json", "content": content}


def text(content: str) -> dict:
    return {"kind": "text", "content": content}


def st(expected: int) -> dict:
    return {"kind": "safetensors", "expected_size": expected, "tensors": 3}


def only(entries: list[FileEntry], **kw) -> Found:
    found = recognize(entries, **kw)
    assert len(found) == 1, [(x.path, x.format) for x in found]
    return found[0]


def by_path(entries: list[FileEntry]) -> dict[str, Found]:
    return {x.path: x for x in recognize(entries)}


def has_reason(found: Found, *words: str) -> bool:
    return any(all(w in reason for w in words) for reason in found.reasons)


# --- PyTorch DCP ------------------------------------------------------------------------------------


def dcp_dir(d: str = "llm/llama/step-100", ranks: int = 2, size: int = 4096) -> list[FileEntry]:
    names = {f"__{r}_0.distcp": size for r in range(ranks)}
    entries = [f(f"{d}/.metadata", 900, dcp_meta(names), mtime=2000.0)]
    entries += [f(f"{d}/{n}", s, mtime=1500.0) for n, s in names.items()]
    return entries


class TestDCP:
    def test_a_whole_save_is_complete_with_its_step_from_the_name(self):
        found = only(dcp_dir())
        assert (found.format, found.step, found.state, found.temporary) == (
            "pytorch_dcp",
            100,
            COMPLETE,
            False,
        )
        assert found.files == [
            "llm/llama/step-100/.metadata",
            "llm/llama/step-100/__0_0.distcp",
            "llm/llama/step-100/__1_0.distcp",
        ]
        assert found.reasons == []
        assert found.expected_files == 3
        assert found.expected_bytes == 900 + 2 * 4096

    def test_a_rank_file_listed_in_the_manifest_but_missing_makes_it_partial(self):
        entries = [e for e in dcp_dir() if not e.path.endswith("__1_0.distcp")]
        found = only(entries)
        assert found.state == PARTIAL
        assert "rank file __1_0.distcp is missing (listed in .metadata)" in found.reasons

    def test_a_rank_file_shorter_than_the_manifest_says_is_corrupt(self):
        entries = [
            f(e.path, e.size - 1024, e.facts, e.mtime) if e.path.endswith("__0_0.distcp") else e for e in dcp_dir()
        ]
        found = only(entries)
        assert found.state == CORRUPT
        assert "__0_0.distcp is 1,024 bytes shorter than .metadata says" in found.reasons

    def test_shards_without_a_manifest_are_partial(self):
        found = only([e for e in dcp_dir() if not e.path.endswith(".metadata")])
        assert found.state == PARTIAL
        assert has_reason(found, ".metadata is missing", "2 .distcp files")

    def test_a_left_over_metadata_tmp_is_a_temporary_partial_copy(self):
        entries = [e for e in dcp_dir() if not e.path.endswith("/.metadata")]
        entries.append(f("llm/llama/step-100/.metadata.tmp", 800))
        found = only(entries)
        assert found.temporary is True
        assert found.state == PARTIAL
        assert "interrupted save: .metadata.tmp left behind" in found.reasons

    def test_a_megatron_metadata_bck_is_an_interrupted_save(self):
        found = only([*dcp_dir(), f("llm/llama/step-100/.metadata.bck", 900)])
        assert found.temporary and found.state == PARTIAL

    def test_a_manifest_older_than_its_shards_is_the_overwrite_trap(self):
        entries = [
            f(e.path, e.size, e.facts, mtime=9000.0) if e.path.endswith("__1_0.distcp") else e for e in dcp_dir()
        ]
        found = only(entries)
        assert found.state == PARTIAL
        assert ".metadata is older than __1_0.distcp (overwritten save?)" in found.reasons

    def test_the_overwrite_check_is_off_when_mtimes_are_not_write_order(self):
        entries = [
            f(e.path, e.size, e.facts, mtime=9000.0) if e.path.endswith("__1_0.distcp") else e for e in dcp_dir()
        ]
        assert only(entries, write_order_mtimes=False).state == COMPLETE

    def test_an_unreadable_manifest_is_corrupt(self):
        entries = dcp_dir()
        entries[0] = f(entries[0].path, 900, {"kind": "dcp_metadata", "error": "pickle truncated"})
        found = only(entries)
        assert found.state == CORRUPT
        assert ".metadata cannot be read: pickle truncated" in found.reasons

    def test_without_facts_rank_gaps_in_file_names_still_count(self):
        entries = [f("b/run/step-5/.metadata", 900)] + [f(f"b/run/step-5/__{r}_0.distcp") for r in (0, 2)]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, ".metadata was not read", "inferred from the files present")
        assert has_reason(found, "no __1_*.distcp")

    def test_without_facts_a_gapless_save_is_complete_with_a_note(self):
        entries = [f("b/run/step-5/.metadata", 900)] + [f(f"b/run/step-5/__{r}_0.distcp") for r in (0, 1)]
        found = only(entries)
        assert found.state == COMPLETE
        assert has_reason(found, "the number of ranks (2) is inferred from the files present", ".metadata was not read")

    def test_per_rank_manifests_without_collectives(self):
        d = "t/r/step-7"
        entries = [
            f(f"{d}/__0.metadata", 300, dcp_meta({"__0_0.distcp": 100})),
            f(f"{d}/__0_0.distcp", 100),
            f(f"{d}/__1.metadata", 300, dcp_meta({"__1_0.distcp": 100})),
            f(f"{d}/__1_0.distcp", 100),
        ]
        assert only(entries).state == COMPLETE
        # Each __N.metadata lists its own rank's files only: nothing records how many ranks there were.
        assert has_reason(only(entries), "the number of ranks (2) is inferred from the files present")
        assert not any(is_note_inferred(r) for r in only(dcp_dir()).reasons)
        partial = only([e for e in entries if not e.path.endswith("__1_0.distcp")])
        assert "rank file __1_0.distcp is missing (listed in __1.metadata)" in partial.reasons

    def test_a_missing_per_rank_manifest_between_others_is_partial(self):
        d = "t/r/step-7"
        entries = [f(f"{d}/__{r}.metadata", 300, dcp_meta({f"__{r}_0.distcp": 100})) for r in (0, 2)]
        entries += [f(f"{d}/__{r}_0.distcp", 100) for r in (0, 1, 2)]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, "__1.metadata is missing")

    def test_a_shard_the_manifest_does_not_list_is_only_noted(self):
        found = only([*dcp_dir(), f("llm/llama/step-100/__2_0.distcp", 10, mtime=1000.0)])
        assert found.state == COMPLETE
        assert has_reason(found, "not listed in the manifest", "__2_0.distcp")

    def test_torchtitan_step_directories(self):
        found = only(dcp_dir("llm/titan/checkpoint/step-300"))
        assert (found.path, found.step) == ("llm/titan/checkpoint/step-300", 300)

    def test_a_nemo_unfinished_marker_makes_it_temporary_and_owns_the_marker(self):
        d = "nlp/nemo/checkpoints/megatron_gpt--step=100-last"
        marker = f"{d}-unfinished"
        found = only([*dcp_dir(d), f(marker, 0)])
        assert found.temporary and found.state == PARTIAL
        assert marker in found.files
        assert found.step == 100

    def test_a_lightning_fsdp_directory_is_dcp_and_owns_meta_pt(self):
        d = "v/r/epoch=0-step=50.ckpt"
        found = only([*dcp_dir(d), f(f"{d}/meta.pt", 500, ZIP_OK)])
        assert (found.format, found.step) == ("pytorch_dcp", 50)
        assert f"{d}/meta.pt" in found.files


# --- Hugging Face -----------------------------------------------------------------------------------


def hf_model(d: str, n: int = 2, size: int = 1000) -> list[FileEntry]:
    shards = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    entries = [
        f(f"{d}/config.json", 200, js({"model_type": "gpt2"})),
        f(
            f"{d}/model.safetensors.index.json",
            300,
            {"kind": "hf_index", "total_size": n * (size - 200), "shards": shards},
        ),
    ]
    entries += [f(f"{d}/{s}", size, st(size)) for s in shards]
    return entries


def trainer_dir(d: str = "nlp/gpt/checkpoint-100", step: int = 100) -> list[FileEntry]:
    return [
        *hf_model(d),
        f(f"{d}/optimizer.pt", 5000, ZIP_OK),
        f(f"{d}/scheduler.pt", 1000, ZIP_OK),
        f(f"{d}/rng_state.pth", 1000, ZIP_OK),
        f(f"{d}/training_args.bin", 1000, ZIP_OK),
        f(f"{d}/trainer_state.json", 400, {"kind": "trainer_state", "global_step": step}),
    ]


class TestHFSafetensors:
    def test_a_sharded_model_with_its_index_is_complete(self):
        found = only(hf_model("nlp/gpt/final"))
        assert (found.format, found.step, found.state) == ("hf_safetensors", None, COMPLETE)
        assert len(found.files) == 4
        assert found.expected_files == 3

    def test_a_shard_listed_in_the_index_but_missing_is_partial(self):
        entries = [e for e in hf_model("m") if not e.path.endswith("model-00002-of-00002.safetensors")]
        found = only(entries)
        assert found.state == PARTIAL
        assert "model-00002-of-00002.safetensors is missing (listed in model.safetensors.index.json)" in (found.reasons)

    def test_a_shard_shorter_than_its_header_is_corrupt(self):
        entries = [
            f(e.path, e.size - 1024, e.facts) if e.path.endswith("00002.safetensors") else e
            for e in hf_model("m", size=5000)
        ]
        found = only(entries)
        assert found.state == CORRUPT
        assert "model-00002-of-00002.safetensors is 1,024 bytes shorter than its header says" in found.reasons

    def test_a_shard_longer_than_its_header_is_corrupt(self):
        entries = [f(e.path, e.size + 1, e.facts) if "00001-of" in e.path else e for e in hf_model("m")]
        found = only(entries)
        assert found.state == CORRUPT
        assert has_reason(found, "1 byte longer than its header says")

    def test_an_unreadable_header_or_index_is_corrupt(self):
        entries = hf_model("m")
        entries[1] = f(entries[1].path, 300, {"kind": "hf_index", "error": "invalid JSON"})
        found = only(entries)
        assert found.state == CORRUPT and has_reason(found, "index.json cannot be read")
        entries = hf_model("m")
        entries[2] = f(entries[2].path, 1000, {"kind": "safetensors", "error": "header too large"})
        assert only(entries).state == CORRUPT

    def test_shards_without_their_index_are_partial(self):
        found = only([e for e in hf_model("m") if "index" not in e.path])
        assert found.state == PARTIAL
        assert has_reason(found, "model.safetensors.index.json is missing")

    def test_a_gap_in_the_shard_series_is_named_without_an_index(self):
        entries = [f(f"m/model-{i:05d}-of-00003.safetensors", 10) for i in (1, 3)]
        found = only([*entries, f("m/model.safetensors.index.json", 10)])
        assert found.state == PARTIAL
        assert "model-00002-of-00003.safetensors is missing (2 of 3 shards present)" in found.reasons

    def test_shards_of_two_saves_mixed_are_corrupt(self):
        entries = [f("m/model-00001-of-00002.safetensors"), f("m/model-00001-of-00003.safetensors")]
        assert only([*entries, f("m/config.json")]).state == CORRUPT

    def test_variant_shards_use_the_variant_index_name(self):
        entries = [f(f"m/model.fp16-{i:05d}-of-00002.safetensors", 10) for i in (1, 2)]
        found = only([*entries, f("m/model.safetensors.index.fp16.json", 10)])
        assert found.state == COMPLETE

    def test_truncated_pytorch_bin_shards_are_corrupt(self):
        entries = [
            f("m/pytorch_model-00001-of-00002.bin", 10, ZIP_OK),
            f("m/pytorch_model-00002-of-00002.bin", 10, ZIP_CUT),
            f("m/pytorch_model.bin.index.json", 10),
        ]
        found = only(entries)
        assert found.state == CORRUPT
        assert has_reason(found, "pytorch_model-00002-of-00002.bin is truncated")

    def test_shards_holding_less_than_the_index_total_are_corrupt(self):
        entries = hf_model("m")
        entries[1] = f(
            entries[1].path,
            300,
            {"kind": "hf_index", "total_size": 10**6, "shards": entries[1].facts["shards"]},
        )
        assert only(entries).state == CORRUPT

    def test_config_and_unsharded_weights_make_a_model_directory(self):
        found = only([f("m/config.json", 10, js({})), f("m/model.safetensors", 500, st(500))])
        assert found.format == "hf_safetensors"

    def test_the_output_dir_model_does_not_swallow_its_checkpoints(self):
        found = by_path([*hf_model("nlp/gpt"), *trainer_dir("nlp/gpt/checkpoint-100")])
        assert set(found) == {"nlp/gpt", "nlp/gpt/checkpoint-100"}
        assert all(p.count("/") == 2 for p in found["nlp/gpt"].files)
        assert found["nlp/gpt/checkpoint-100"].format == "hf_trainer"


class TestHFTrainer:
    def test_a_whole_checkpoint_folder_is_complete(self):
        found = only(trainer_dir())
        assert (found.format, found.step, found.state) == ("hf_trainer", 100, COMPLETE)
        assert len(found.files) == 9

    def test_without_trainer_state_it_is_partial(self):
        found = only([e for e in trainer_dir() if not e.path.endswith("trainer_state.json")])
        assert found.state == PARTIAL
        assert has_reason(found, "trainer_state.json is missing")

    def test_a_global_step_other_than_the_folder_name_is_corrupt(self):
        entries = trainer_dir()
        entries[-1] = f(entries[-1].path, 400, {"kind": "trainer_state", "global_step": 90})
        found = only(entries)
        assert found.state == CORRUPT
        assert "trainer_state.json says global_step 90, but the folder is checkpoint-100" in found.reasons

    def test_a_gap_in_the_rng_states_is_partial(self):
        d = "nlp/gpt/checkpoint-100"
        entries = [e for e in trainer_dir(d) if "rng_state" not in e.path]
        entries += [f(f"{d}/rng_state_{i}.pth", 100, ZIP_OK) for i in (0, 2)]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, "rng_state_1.pth is missing")

    def test_rng_state_0_alone_is_partial_because_one_process_writes_rng_state_pth(self):
        d = "nlp/gpt/checkpoint-100"
        entries = [e for e in trainer_dir(d) if "rng_state" not in e.path]
        found = only([*entries, f(f"{d}/rng_state_0.pth", 100, ZIP_OK)])
        assert found.state == PARTIAL and has_reason(found, "rng_state_1.pth is missing", "more than one process")
        whole = only([*entries, *(f(f"{d}/rng_state_{i}.pth", 100, ZIP_OK) for i in (0, 1))])
        assert whole.state == COMPLETE
        assert has_reason(whole, "the number of processes (2) is inferred from the files present")
        assert not any(is_note_inferred(r) for r in only(trainer_dir(d)).reasons)  # rng_state.pth: one process

    def test_no_weights_at_all_is_partial(self):
        d = "nlp/gpt/checkpoint-100"
        entries = [e for e in trainer_dir(d) if "model" not in e.path]
        found = only(entries)
        assert found.state == PARTIAL and has_reason(found, "no model weights")

    def test_a_truncated_optimizer_is_corrupt(self):
        entries = [f(e.path, e.size, ZIP_CUT) if e.path.endswith("optimizer.pt") else e for e in trainer_dir()]
        found = only(entries)
        assert found.state == CORRUPT
        assert has_reason(found, "optimizer.pt is truncated")

    def test_a_missing_shard_inside_a_trainer_folder_is_partial(self):
        entries = [e for e in trainer_dir() if "00001-of" not in e.path]
        assert only(entries).state == PARTIAL

    def test_fsdp_state_is_judged_as_dcp_inside_the_folder(self):
        d = "nlp/gpt/checkpoint-100"
        base = [e for e in trainer_dir(d) if "model" not in e.path]
        fsdp = dcp_dir(f"{d}/pytorch_model_fsdp_0")
        found = only([*base, *fsdp])
        assert found.state == COMPLETE
        broken = only([*base, *[e for e in fsdp if not e.path.endswith("__1_0.distcp")]])
        assert broken.state == PARTIAL
        assert has_reason(broken, "pytorch_model_fsdp_0/__1_0.distcp is missing")

    def test_deepspeed_state_inside_the_folder_is_one_checkpoint(self):
        d = "nlp/gpt/checkpoint-100"
        entries = [
            *trainer_dir(d),
            f(f"{d}/latest", 14, text("global_step100")),
            *ds_tag(f"{d}/global_step100"),
        ]
        found = only(entries)
        assert found.format == "hf_trainer" and found.state == COMPLETE
        assert f"{d}/global_step100/mp_rank_00_model_states.pt" in found.files

    def test_a_plain_dcp_save_in_a_checkpoint_folder_is_left_to_dcp(self):
        found = only(dcp_dir("x/run/checkpoint-5"))
        assert (found.format, found.step) == ("pytorch_dcp", 5)


# --- DeepSpeed --------------------------------------------------------------------------------------


def ds_tag(d: str, dp: int = 2, mp: int = 1, prefix: str = "") -> list[FileEntry]:
    entries = [f(f"{d}/mp_rank_{m:02d}_model_states.pt", 3000, ZIP_OK) for m in range(mp)]
    entries += [
        f(f"{d}/{prefix}zero_pp_rank_{r}_mp_rank_{m:02d}_optim_states.pt", 2000, ZIP_OK)
        for m in range(mp)
        for r in range(dp)
    ]
    return entries


def ds_save(root: str = "speech/ds", steps=(100, 200), latest: int = 200, dp: int = 2) -> list[FileEntry]:
    entries = [f(f"{root}/latest", 14, text(f"global_step{latest}")), f(f"{root}/zero_to_fp32.py", 90)]
    for step in steps:
        entries += ds_tag(f"{root}/global_step{step}", dp=dp)
    return entries


def with_world(entry: FileEntry, dp: int, mp: int = 1) -> FileEntry:
    """The entry with the world size the agent reads from a model states file's saved dict."""
    if not entry.name.endswith("model_states.pt"):
        return entry
    facts = {**(entry.facts or ZIP_OK), "deepspeed": {"dp_world_size": dp, "mp_world_size": mp}}
    return f(entry.path, entry.size, facts, entry.mtime)


class TestDeepSpeed:
    def test_whole_tags_are_complete_and_the_tracker_is_no_ones(self):
        found = recognize(ds_save())
        assert [(x.path, x.format, x.step, x.state) for x in found] == [
            ("speech/ds/global_step100", "deepspeed", 100, COMPLETE),
            ("speech/ds/global_step200", "deepspeed", 200, COMPLETE),
        ]
        claimed = {p for x in found for p in x.files}
        assert "speech/ds/latest" not in claimed and "speech/ds/zero_to_fp32.py" not in claimed

    def test_a_gap_in_the_data_parallel_ranks_is_partial(self):
        entries = [
            e for e in ds_save(dp=4) if e.path != "speech/ds/global_step200/zero_pp_rank_2_mp_rank_00_optim_states.pt"
        ]
        found = by_path(entries)["speech/ds/global_step200"]
        assert found.state == PARTIAL
        assert has_reason(found, "zero_pp_rank_2_mp_rank_00_optim_states.pt is missing", "0, 1 and 3")

    def test_a_missing_highest_rank_is_noted_from_a_sibling_tag_but_not_judged(self):
        entries = [
            e for e in ds_save() if e.path != "speech/ds/global_step200/zero_pp_rank_1_mp_rank_00_optim_states.pt"
        ]
        found = by_path(entries)["speech/ds/global_step200"]
        assert found.state == COMPLETE
        assert has_reason(found, "global_step100 beside it has 2")

    def test_missing_model_states_are_partial(self):
        entries = [e for e in ds_save() if e.path != "speech/ds/global_step100/mp_rank_00_model_states.pt"]
        found = by_path(entries)["speech/ds/global_step100"]
        assert found.state == PARTIAL and has_reason(found, "mp_rank_00_model_states.pt is missing")

    def test_a_tag_newer_than_latest_is_partial(self):
        found = by_path(ds_save(steps=(100, 200, 300)))["speech/ds/global_step300"]
        assert found.state == PARTIAL
        assert has_reason(found, "global_step300 is newer than `latest` (global_step200)")

    def test_a_truncated_state_file_is_corrupt(self):
        entries = [
            f(e.path, e.size, ZIP_CUT)
            if e.path.endswith("global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt")
            else e
            for e in ds_save()
        ]
        found = by_path(entries)["speech/ds/global_step100"]
        assert found.state == CORRUPT
        assert has_reason(found, "zero_pp_rank_1_mp_rank_00_optim_states.pt is truncated")

    def test_model_parallel_ranks_must_agree_and_be_contiguous(self):
        entries = ds_tag("s/r/global_step1", dp=2, mp=3)
        entries = [e for e in entries if "zero_pp_rank_1_mp_rank_02" not in e.path]
        found = only(entries)
        assert found.state == PARTIAL and has_reason(found, "disagree")
        entries = [e for e in ds_tag("s/r/global_step1", dp=1, mp=3) if "mp_rank_01" not in e.path]
        assert has_reason(only(entries), "model-parallel rank 01")

    def test_zero3_model_states_per_data_parallel_rank(self):
        d = "s/r/global_step1"
        entries = [
            f(f"{d}/zero_pp_rank_{r}_mp_rank_00_{k}_states.pt", 10, ZIP_OK) for r in (0, 1) for k in ("model", "optim")
        ]
        assert only(entries).state == COMPLETE
        broken = only([e for e in entries if e.path != f"{d}/zero_pp_rank_0_mp_rank_00_model_states.pt"])
        assert broken.state == PARTIAL

    def test_bf16_optimizer_files_and_custom_tags(self):
        found = only(ds_tag("s/r/my_tag", prefix="bf16_"))
        assert (found.format, found.step, found.state) == ("deepspeed", None, COMPLETE)

    # The world size the model states record (engine.py _common_checkpoint_state: dp_world_size, mp_world_size).

    def test_a_missing_highest_rank_is_partial_when_the_model_states_record_the_world_size(self):
        entries = [
            with_world(e, dp=4)
            for e in ds_save(dp=4)
            if e.path != "speech/ds/global_step200/zero_pp_rank_3_mp_rank_00_optim_states.pt"
        ]
        found = by_path(entries)["speech/ds/global_step200"]
        # `latest` names this very tag: the tracker does not make a missing rank whole.
        assert found.state == PARTIAL
        assert has_reason(
            found,
            "zero_pp_rank_3_mp_rank_00_optim_states.pt is missing",
            "mp_rank_00_model_states.pt records dp_world_size 4",
        )
        assert by_path(entries)["speech/ds/global_step100"].state == COMPLETE

    def test_without_the_recorded_world_size_a_missing_highest_rank_is_still_only_noted(self):
        entries = [
            e for e in ds_save(dp=4) if e.path != "speech/ds/global_step200/zero_pp_rank_3_mp_rank_00_optim_states.pt"
        ]
        found = by_path(entries)["speech/ds/global_step200"]
        assert found.state == COMPLETE and has_reason(found, "global_step100 beside it has 4")
        assert has_reason(found, "number of model- and data-parallel ranks is inferred from the files present")
        recorded = [with_world(e, dp=4) for e in entries]
        assert not any(is_note_inferred(r) for r in by_path(recorded)["speech/ds/global_step100"].reasons)

    def test_the_recorded_world_size_never_hides_a_gap(self):
        # Files of ranks 0..3 but the model states say 2: rank 2's gap still counts.
        entries = [
            with_world(e, dp=2)
            for e in ds_tag("s/r/global_step1", dp=4)
            if not e.path.endswith("zero_pp_rank_2_mp_rank_00_optim_states.pt")
        ]
        found = only(entries)
        assert found.state == PARTIAL and has_reason(found, "zero_pp_rank_2_mp_rank_00_optim_states.pt is missing")

    def test_several_missing_ranks_are_named_in_one_reason(self):
        entries = [
            with_world(e, dp=8)
            for e in ds_tag("s/r/global_step1", dp=8)
            if not any(f"zero_pp_rank_{r}_" in e.path for r in (5, 6, 7))
        ]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, "data-parallel ranks 5, 6 and 7 are missing for mp rank 00", "dp_world_size 8")

    def test_a_whole_model_parallel_rank_missing_is_partial_from_the_recorded_mp_world_size(self):
        entries = [
            with_world(e, dp=2, mp=2) for e in ds_tag("s/r/global_step1", dp=2, mp=2) if "mp_rank_01" not in e.path
        ]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, "mp_rank_01_model_states.pt is missing", "records mp_world_size 2")
        assert has_reason(found, "data-parallel ranks 0 and 1 are missing for mp rank 01")

    def test_model_states_that_record_different_world_sizes_are_corrupt(self):
        entries = ds_tag("s/r/global_step1", dp=2, mp=2)
        entries = [with_world(e, dp=2 if "mp_rank_00" in e.path else 4, mp=2) for e in entries]
        found = only(entries)
        assert found.state == CORRUPT and has_reason(found, "different world sizes", "dp 2 x mp 2", "dp 4 x mp 2")

    def test_stage_0_without_optimizer_files_needs_only_the_model_states(self):
        # fp16/fp32 without ZeRO keeps the optimizer in the model states and writes no optimizer file.
        d = "s/r/global_step1"
        entries = [with_world(f(f"{d}/mp_rank_{m:02d}_model_states.pt", 3000, ZIP_OK), dp=4, mp=2) for m in (0, 1)]
        assert only(entries).state == COMPLETE

    def test_bf16_files_and_the_old_name_without_an_underscore_count_too(self):
        entries = [with_world(e, dp=3) for e in ds_tag("s/r/global_step1", dp=3, prefix="bf16_")]
        assert only(entries).state == COMPLETE
        entries = [f(e.path.replace("_optim_states", "optim_states"), e.size, e.facts) for e in entries]
        assert only(entries).state == COMPLETE
        missing = only([e for e in entries if "zero_pp_rank_2_" not in e.path])
        assert missing.state == PARTIAL and has_reason(missing, "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt")

    def test_zero3_model_states_may_carry_the_world_size(self):
        d = "s/r/global_step1"
        entries = [
            with_world(f(f"{d}/zero_pp_rank_{r}_mp_rank_00_{k}_states.pt", 10, ZIP_OK), dp=3)
            for r in (0, 1)
            for k in ("model", "optim")
        ]
        found = only(entries)
        assert found.state == PARTIAL and has_reason(found, "zero_pp_rank_2_mp_rank_00_optim_states.pt is missing")


# --- Megatron ---------------------------------------------------------------------------------------


def megatron_legacy(d: str = "llm/meg/iter_0000200", tp: int = 2, pp: int | None = None) -> list[FileEntry]:
    entries = []
    for t in range(tp):
        for p in range(pp or 1):
            rank = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp else "")
            entries.append(f(f"{d}/{rank}/model_optim_rng.pt", 5000, ZIP_OK))
    return entries


def with_sizes(entry: FileEntry, tp: int, pp: int = 1, ep: int = 1) -> FileEntry:
    """The entry with the parallel sizes the agent reads from a model_optim_rng.pt's pickled args."""
    sizes = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "expert_model_parallel_size": ep}
    return f(entry.path, entry.size, {**(entry.facts or ZIP_OK), "megatron": sizes}, entry.mtime)


def megatron_dist(d: str = "llm/meg/iter_0000300") -> list[FileEntry]:
    return [
        *dcp_dir(d),
        f(f"{d}/common.pt", 800, ZIP_OK),
        f(f"{d}/metadata.json", 100, js({"sharded_backend": "torch_dist"})),
    ]


class TestMegatron:
    def test_a_whole_legacy_iteration_is_complete(self):
        found = only([f("llm/meg/latest_checkpointed_iteration.txt", 3, text("200")), *megatron_legacy()])
        assert (found.path, found.format, found.step, found.state) == (
            "llm/meg/iter_0000200",
            "megatron",
            200,
            COMPLETE,
        )

    def test_a_hole_in_the_rank_grid_is_partial(self):
        entries = [e for e in megatron_legacy(tp=2, pp=2) if "mp_rank_01_001" not in e.path]
        found = only(entries)
        assert found.state == PARTIAL
        assert (
            "mp_rank_01_001/model_optim_rng.pt is missing (the tensor x pipeline rank grid is 2 x 2)" in found.reasons
        )

    def test_the_parallel_sizes_the_args_record_make_a_missing_highest_pipeline_rank_partial(self):
        entries = [with_sizes(e, tp=2, pp=2) for e in megatron_legacy(tp=2, pp=2) if "mp_rank_01_001" not in e.path]
        found = only(entries)
        assert found.state == PARTIAL
        assert (
            "mp_rank_01_001/model_optim_rng.pt is missing (mp_rank_00_000/model_optim_rng.pt records "
            "tensor_model_parallel_size 2, pipeline_model_parallel_size 2)"
        ) in found.reasons
        assert not any(is_note_inferred(r) for r in found.reasons)

    def test_a_whole_tensor_parallel_rank_missing_at_the_top_is_partial_only_by_the_records(self):
        d = "llm/meg/iter_0000200"
        entries = [e for e in megatron_legacy(d, tp=4) if "mp_rank_03" not in e.path]
        assert only(entries).state == COMPLETE  # three whole ranks: nothing in the names says a fourth is missing
        found = only([with_sizes(e, tp=4) for e in entries])
        assert found.state == PARTIAL and has_reason(found, "mp_rank_03/model_optim_rng.pt is missing", "size 4")

    def test_expert_parallel_folders_carry_the_expert_rank_after_the_tensor_rank(self):
        # get_checkpoint_name: mp_rank_{tp:02d}[_{pp:03d}] + _{ep:03d} when expert_model_parallel_size > 1.
        d = "llm/moe/iter_0000100"
        names = ["mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"]
        entries = [with_sizes(f(f"{d}/{n}/model_optim_rng.pt", 5000, ZIP_OK), tp=2, ep=2) for n in names]
        assert only(entries).state == COMPLETE
        found = only(entries[:-1])
        assert found.state == PARTIAL
        assert has_reason(found, "mp_rank_01_001/model_optim_rng.pt is missing", "expert_model_parallel_size 2")

    def test_rank_files_that_record_different_sizes_are_corrupt(self):
        entries = megatron_legacy(tp=2)
        entries = [with_sizes(entries[0], tp=2), with_sizes(entries[1], tp=4)]
        found = only(entries)
        assert found.state == CORRUPT and has_reason(found, "record different parallel sizes")

    def test_without_the_args_the_grid_is_inferred_and_the_verdict_says_so(self):
        found = only(megatron_legacy(tp=2))
        assert found.state == COMPLETE
        assert [r for r in found.reasons if is_note_inferred(r)] == [
            "the tensor rank grid (2) is inferred from the files present (no model_optim_rng.pt's args were read): "
            "a save missing its highest rank would look complete"
        ]

    def test_a_rank_dir_without_its_model_file_is_partial(self):
        d = "llm/meg/iter_0000200"
        entries = [*megatron_legacy(d)[:1], f(f"{d}/mp_rank_01/distrib_optim.pt", 10, ZIP_OK)]
        found = only(entries)
        assert found.state == PARTIAL
        assert has_reason(found, "mp_rank_01/model_optim_rng.pt is missing")
        assert has_reason(found, "mp_rank_00/distrib_optim.pt is missing")

    def test_an_iteration_newer_than_the_tracker_is_partial(self):
        found = only([f("llm/meg/latest_checkpointed_iteration.txt", 3, text("100")), *megatron_legacy()])
        assert found.state == PARTIAL
        assert has_reason(found, "iteration 200 is newer than latest_checkpointed_iteration.txt (100)")

    def test_a_release_directory(self):
        found = only(megatron_legacy("llm/meg/release"))
        assert (found.format, found.step) == ("megatron", None)

    def test_a_whole_torch_dist_iteration_is_complete(self):
        found = only(megatron_dist())
        assert (found.format, found.step, found.state) == ("megatron_dist", 300, COMPLETE)

    def test_torch_dist_without_metadata_json_is_partial(self):
        found = only([e for e in megatron_dist() if not e.path.endswith("metadata.json")])
        assert found.format == "megatron_dist" and found.state == PARTIAL
        assert has_reason(found, "metadata.json is missing")

    def test_torch_dist_judges_its_dcp_manifest(self):
        found = only([e for e in megatron_dist() if not e.path.endswith("__0_0.distcp")])
        assert found.state == PARTIAL and "rank file __0_0.distcp is missing (listed in .metadata)" in found.reasons

    def test_integrity_json_gives_reference_checksums_and_catches_mismatches(self):
        d = "llm/meg/iter_0000300"
        good, bad = "a" * 64, "b" * 64
        integrity = f(f"{d}/integrity.json", 300, js({"algorithm": "sha256", "files": {"__0_0.distcp": good}}))
        entries = [*megatron_dist(d), integrity]
        found = only(entries)
        assert found.reference_checksums == {f"{d}/__0_0.distcp": ("sha256", good)}
        assert found.state == COMPLETE
        tampered = [
            f(e.path, e.size, e.facts, checksum=bad, checksum_algo="sha256") if e.path.endswith("__0_0.distcp") else e
            for e in entries
        ]
        found = only(tampered)
        assert found.state == CORRUPT and has_reason(found, "__0_0.distcp: its sha256 does not match integrity.json")
        missing = [*megatron_dist(d), f(f"{d}/integrity.json", 300, js({"files": {"gone.pt": good}}))]
        assert "gone.pt is missing (listed in integrity.json)" in only(missing).reasons

    def test_a_torch_dist_iteration_newer_than_the_tracker_is_only_noted(self):
        found = only([f("llm/meg/latest_checkpointed_iteration.txt", 3, text("200")), *megatron_dist()])
        assert found.state == COMPLETE
        assert has_reason(found, "newer than latest_checkpointed_iteration.txt")

    def test_nemo_distributed_checkpoints_and_their_unfinished_marker(self):
        d = "nlp/nemo/checkpoints/megatron_gpt--val_loss=2.1-step=1000-consumed_samples=8000"
        found = only(megatron_dist(d))
        assert (found.format, found.step, found.temporary) == ("megatron_dist", 1000, False)
        found = only([*megatron_dist(d), f(f"{d}-unfinished", 0)])
        assert found.temporary and found.state == PARTIAL


# --- Orbax ------------------------------------------------------------------------------------------


def orbax_step(d: str = "vision/vit/500", committed: bool = True) -> list[FileEntry]:
    meta = {"item_handlers": {"state": "PyTreeCheckpointHandler"}, "init_timestamp_nsecs": 1}
    if committed:
        meta["commit_timestamp_nsecs"] = 2
    return [
        f(f"{d}/_CHECKPOINT_METADATA", 200, js(meta)),
        f(f"{d}/state/_METADATA", 300, js({"tree_metadata": {}})),
        f(f"{d}/state/manifest.ocdbt", 64),
        f(f"{d}/state/d/abc", 512),
        f(f"{d}/state/ocdbt.process_0/manifest.ocdbt", 64),
        f(f"{d}/state/ocdbt.process_0/d/def", 256),
    ]


class TestOrbax:
    def test_a_finalised_step_is_complete(self):
        found = only(orbax_step())
        assert (found.format, found.step, found.state, len(found.files)) == ("orbax", 500, COMPLETE, 6)

    def test_the_number_of_processes_is_inferred_from_the_folders_and_said_so(self):
        found = only(orbax_step())
        assert found.state == COMPLETE
        assert has_reason(found, "the number of processes of state/ (1) is inferred from the files present")

    def test_a_tmp_directory_is_temporary_and_partial(self):
        found = only(orbax_step("vision/vit/600.orbax-checkpoint-tmp-1700000000", committed=False))
        assert (found.step, found.temporary, found.state) == (600, True, PARTIAL)
        assert has_reason(found, "interrupted save")

    def test_no_commit_timestamp_is_partial(self):
        found = only(orbax_step(committed=False))
        assert found.state == PARTIAL and has_reason(found, "commit_timestamp_nsecs")

    def test_an_item_named_in_the_metadata_but_missing_is_partial(self):
        found = only([e for e in orbax_step() if "/state/" not in e.path])
        assert found.state == PARTIAL and "item state/ is missing (listed in _CHECKPOINT_METADATA)" in found.reasons

    def test_unmerged_process_manifests_are_partial(self):
        found = only([e for e in orbax_step() if not e.path.endswith("state/manifest.ocdbt")])
        assert found.state == PARTIAL and has_reason(found, "state/manifest.ocdbt is missing")

    def test_an_unreadable_checkpoint_metadata_is_corrupt(self):
        entries = orbax_step()
        entries[0] = f(entries[0].path, 200, {"kind": "json", "error": "invalid JSON"})
        assert only(entries).state == CORRUPT

    def test_older_orbax_without_checkpoint_metadata_is_complete_with_a_note(self):
        found = only([e for e in orbax_step("v/r/checkpoint_700") if "_CHECKPOINT_METADATA" not in e.path])
        assert (found.format, found.step, found.state) == ("orbax", 700, COMPLETE)
        assert has_reason(found, "older Orbax")


# --- Single files -----------------------------------------------------------------------------------


class TestSingleFile:
    def test_each_checkpoint_file_is_its_own_copy(self):
        found = by_path(
            [
                f("v/r/epoch=0-step=100.ckpt", 10, ZIP_OK),
                f("v/r/last.ckpt", 10, ZIP_OK),
                f("v/r/ep1-ba500-rank0.pt", 10, ZIP_OK),
                f("v/r/notes.txt", 10),
            ]
        )
        assert {p: (x.format, x.step, x.state) for p, x in found.items()} == {
            "v/r/epoch=0-step=100.ckpt": ("single_file", 100, COMPLETE),
            "v/r/last.ckpt": ("single_file", None, COMPLETE),
            "v/r/ep1-ba500-rank0.pt": ("single_file", 500, COMPLETE),
        }

    @pytest.mark.parametrize(
        ("facts", "words"),
        [
            (ZIP_CUT, "end-of-central-directory"),
            ({"kind": "torch_file", "container": "pickle", "complete": False}, "pickle stream does not end"),
            ({"kind": "torch_file", "container": "unknown", "complete": None}, "not a torch.save file"),
            ({"kind": "torch_file", "error": "permission denied"}, "cannot be read"),
        ],
    )
    def test_a_broken_torch_file_is_corrupt(self, facts, words):
        found = only([f("v/r/model.pt", 10, facts)])
        assert found.state == CORRUPT and has_reason(found, "model.pt", words)

    def test_a_zip_member_whose_crc32_the_agent_found_wrong_is_corrupt(self):
        bad = {**ZIP_OK, "members_checked": 5, "members_bad": ["archive/data/0", "archive/data/3"]}
        found = only([f("r/epoch=0-step=100.ckpt", 5000, bad)])
        assert found.state == CORRUPT
        assert has_reason(found, "zip member archive/data/0", "differs from the one the zip records", "1 more")
        good = {**ZIP_OK, "members_checked": 5, "members_bad": []}
        assert only([f("r/epoch=0-step=100.ckpt", 5000, good)]).state == COMPLETE

    def test_a_safetensors_file_must_match_its_header(self):
        assert only([f("v/r/w.safetensors", 90, st(100))]).state == CORRUPT
        assert only([f("v/r/w.safetensors", 100, st(100))]).state == COMPLETE

    def test_a_lightning_tmp_file_is_a_temporary_copy(self):
        found = only([f("v/r/epoch=2-step=300.ckpt.a1b2c3.tmp", 10)])
        assert (found.format, found.step, found.temporary, found.state) == ("single_file", 300, True, PARTIAL)

    def test_a_nemo_file_with_its_unfinished_marker(self):
        found = only([f("n/r/model--step=5.nemo", 10), f("n/r/model--step=5-unfinished", 0)])
        assert found.temporary and found.files == ["n/r/model--step=5-unfinished", "n/r/model--step=5.nemo"]


# --- Sidecar ----------------------------------------------------------------------------------------


def sidecar_for(d: str, entries: list[FileEntry], **fields) -> FileEntry:
    records = [{"path": e.path[len(d) + 1 :], "size": e.size, "sha256": f"{i:064x}"} for i, e in enumerate(entries)]
    content = {
        "schema": "ckptfleet/1",
        "run": "llama",
        "team": "llm",
        "step": 100,
        "importance": "critical",
        "files": records,
        **fields,
    }
    return f(f"{d}/ckptfleet.json", 700, js(content))


class TestSidecar:
    def test_it_enriches_the_underlying_format(self):
        d = "llm/llama/step-100"
        members = dcp_dir(d)
        found = only([*members, sidecar_for(d, members)])
        assert (found.format, found.step, found.state) == ("pytorch_dcp", 100, COMPLETE)
        assert (found.run, found.team, found.importance) == ("llama", "llm", "critical")
        assert found.reference_checksums[f"{d}/__1_0.distcp"] == ("sha256", f"{2:064x}")
        assert f"{d}/ckptfleet.json" in found.files
        assert found.expected_files == 4
        assert found.expected_bytes == sum(e.size for e in members) + 700

    def test_a_listed_file_missing_is_partial(self):
        d = "llm/llama/step-100"
        members = dcp_dir(d)
        sidecar = sidecar_for(d, [*members, f(f"{d}/extra.bin", 5)])
        found = only([*members, sidecar])
        assert found.state == PARTIAL and "extra.bin is missing (listed in ckptfleet.json)" in found.reasons

    def test_a_size_or_checksum_mismatch_is_corrupt(self):
        d = "llm/llama/step-100"
        members = dcp_dir(d)
        sidecar = sidecar_for(d, members)
        grown = [f(e.path, e.size + 10, e.facts, e.mtime) if e.path.endswith("__0_0.distcp") else e for e in members]
        found = only([*grown, sidecar])
        assert found.state == CORRUPT and "__0_0.distcp is 10 bytes longer than ckptfleet.json says" in found.reasons
        hashed = [
            FileEntry(e.path, e.size, e.mtime, e.facts, checksum="f" * 64, checksum_algo="sha256") for e in members
        ]
        found = only([*hashed, sidecar])
        assert found.state == CORRUPT and has_reason(found, "sha256 does not match ckptfleet.json")

    def test_a_matching_checksum_is_not_a_reason(self):
        d = "r/x"
        member = f(f"{d}/weights.npz", 10)
        sidecar = sidecar_for(d, [member])
        hashed = FileEntry(member.path, 10, checksum=f"{0:064x}", checksum_algo="sha256")
        found = only([hashed, sidecar])
        assert found.state == COMPLETE and found.reasons == []

    def test_without_a_known_format_the_sidecar_alone_makes_a_checkpoint(self):
        d = "jax/run/ckpt-9"
        member = f(f"{d}/params.npz", 10)
        found = only([member, sidecar_for(d, [member], step=9)])
        assert (found.path, found.format, found.step, found.state) == (d, "sidecar", 9, COMPLETE)
        assert found.files == [f"{d}/ckptfleet.json", member.path]

    def test_next_to_one_of_several_single_files_it_describes_that_one(self):
        d = "v/r"
        a, b = f(f"{d}/epoch=0-step=100.ckpt", 10, ZIP_OK), f(f"{d}/epoch=1-step=200.ckpt", 10, ZIP_OK)
        found = by_path([a, b, sidecar_for(d, [b], step=200)])
        assert set(found) == {a.path, b.path}
        assert found[b.path].run == "llama" and f"{d}/ckptfleet.json" in found[b.path].files
        assert found[a.path].run is None

    def test_an_unreadable_or_malformed_sidecar_is_corrupt(self):
        d = "llm/llama/step-100"
        broken = f(f"{d}/ckptfleet.json", 10, {"kind": "json", "error": "invalid JSON at line 1"})
        found = only([*dcp_dir(d), broken])
        assert found.format == "pytorch_dcp" and found.state == CORRUPT
        assert has_reason(found, "ckptfleet.json cannot be read")
        malformed = f(f"{d}/ckptfleet.json", 10, js({"files": [{"path": "../etc/passwd", "size": 1}]}))
        assert only([*dcp_dir(d), malformed]).state == CORRUPT
        no_list = f(f"{d}/ckptfleet.json", 10, js({"run": "x"}))
        assert has_reason(only([*dcp_dir(d), no_list]), 'no "files" list')

    def test_a_broken_sidecar_among_several_single_files_blames_none_of_them(self):
        d = "v/r"
        a, b = f(f"{d}/epoch=0-step=100.ckpt", 10, ZIP_OK), f(f"{d}/epoch=1-step=200.ckpt", 10, ZIP_OK)
        broken = f(f"{d}/ckptfleet.json", 10, {"kind": "json", "error": "invalid JSON"})
        found = by_path([a, b, broken])
        assert found[a.path].state == COMPLETE and found[b.path].state == COMPLETE
        assert (found[d].format, found[d].state, found[d].files) == ("sidecar", CORRUPT, [broken.path])

    def test_unknown_importance_is_ignored_with_a_note(self):
        d = "llm/llama/step-100"
        members = dcp_dir(d)
        found = only([*members, sidecar_for(d, members, importance="urgent")])
        assert found.importance is None and has_reason(found, "unknown importance")

    def test_the_sidecar_step_wins_over_the_name_with_a_note(self):
        d = "llm/llama/step-100"
        members = dcp_dir(d)
        found = only([*members, sidecar_for(d, members, step=101)])
        assert found.step == 101 and has_reason(found, "says step 101")

    def test_an_unread_sidecar_is_still_a_member_file(self):
        d = "llm/llama/step-100"
        found = only([*dcp_dir(d), f(f"{d}/ckptfleet.json", 10)])
        assert found.state == COMPLETE and found.run is None
        assert f"{d}/ckptfleet.json" in found.files


# --- Registry and engine ----------------------------------------------------------------------------


class TestRegistryAndEngine:
    def test_formats_are_sorted_by_priority_with_unique_names(self):
        priorities = [fmt.priority for fmt in FORMATS]
        assert priorities == sorted(priorities)
        assert FORMATS[0].name == "sidecar" and FORMATS[-1].name == "single_file"
        assert len(FORMAT_LABELS) == len(FORMATS)

    @pytest.mark.parametrize(
        ("name", "step"),
        [
            ("checkpoint-500", 500),
            ("global_step12", 12),
            ("iter_0000300", 300),
            ("step-7", 7),
            ("epoch=3-step=900.ckpt", 900),
            ("ep2-ba1200-rank0.pt", 1200),
            ("1500", 1500),
            ("checkpoint_20", 20),
            ("latest", None),
            ("final", None),
        ],
    )
    def test_step_from_name(self, name, step):
        assert step_from_name(name) == step

    def test_entries_from_agent_lines(self):
        lines = [
            {"type": "header", "format": "ckptfleet-inventory/1"},
            {"type": "file", "path": "a/b.pt", "size": 5, "mtime": 1.5, "sha256": "ab" * 32, "facts": ZIP_OK},
            {"type": "file", "path": "a/c.pt", "size": 6, "mtime": 2},
            {"type": "end", "files": 2, "bytes": 11},
        ]
        assert entries_from_agent_lines(lines) == [
            FileEntry("a/b.pt", 5, 1.5, ZIP_OK, "ab" * 32, "sha256"),
            FileEntry("a/c.pt", 6, 2.0, None, None, None),
        ]

    def test_a_duplicate_path_is_refused(self):
        with pytest.raises(ValueError, match="duplicate path"):
            build_tree([f("a/x.pt"), f("a/x.pt")])

    def test_results_are_sorted_and_files_are_claimed_once(self):
        entries = [*ds_save(), *dcp_dir(), *orbax_step(), f("v/r/a.ckpt", 1, ZIP_OK)]
        found = recognize(entries)
        assert [x.path for x in found] == sorted(x.path for x in found)
        owned = [p for x in found for p in x.files]
        assert len(owned) == len(set(owned))

    def test_a_new_format_is_offered_directories_in_priority_order(self):
        class Npz(CheckpointFormat):
            name = "npz"
            priority = 1

            def claim(self, directory: DirView) -> list[Found]:
                files = [e.path for e in directory.files.values() if e.name.endswith(".npz")]
                return [Found(path=p, format=self.name, step=None, files=[p]) for p in files]

        entries = [f("j/r/a.npz"), f("j/r/b.pt", 10, ZIP_OK)]
        found = recognize(entries, formats=[*FORMATS, Npz()])
        assert {(x.path, x.format) for x in found} == {("j/r/a.npz", "npz"), ("j/r/b.pt", "single_file")}

    def test_a_partly_claimed_directory_shows_later_formats_only_what_is_left(self):
        seen: list[set[str]] = []

        class Spy(CheckpointFormat):
            name = "spy"
            priority = 95

            def claim(self, directory: DirView) -> list[Found]:
                seen.append(set(directory.files))
                return []

        recognize([f("r/a.pt", 1, ZIP_OK), f("r/notes.txt")], formats=[*FORMATS, Spy()])
        assert {"notes.txt"} in seen and not any("a.pt" in s for s in seen)

    def test_it_scales_linearly_to_a_hundred_thousand_files(self, monkeypatch):
        """The work grows with the files, not with their square: counted in what the formats are shown."""
        shown = {"calls": 0, "files": 0}

        def counted(claim):
            def claim_counted(directory: DirView) -> list[Found]:
                shown["calls"] += 1
                shown["files"] += len(directory.files)
                return claim(directory)

            return claim_counted

        for fmt in FORMATS:
            monkeypatch.setattr(fmt, "claim", counted(fmt.claim))

        def work(runs: int) -> tuple[int, dict[str, int]]:
            entries = []
            for run in range(runs):
                for step in range(20):
                    d = f"team/run{run}/step-{step * 100}"
                    names = {f"__{r}_0.distcp": 10 for r in range(200)}
                    entries.append(f(f"{d}/.metadata", 10, dcp_meta(names), mtime=5.0))
                    entries += [f(f"{d}/{n}", 10, mtime=1.0) for n in names]
            shown.update(calls=0, files=0)
            found = recognize(entries)
            assert len(found) == 20 * runs and all(x.state == COMPLETE for x in found)
            return len(entries), dict(shown)

        small_files, small = work(1)
        big_files, big = work(25)
        assert big_files > 100_000 and big_files == 25 * small_files
        # 25 times the files: at most 25 times the directories offered and the files shown (quadratic: 625).
        assert small["calls"] > 0 and big["calls"] <= 25 * small["calls"]
        assert small["files"] > 0 and big["files"] <= 25 * small["files"]
