"""The committed checkpoint trees (demo/README.md): what each holds, as recognition must find it, and its files."""

from __future__ import annotations

from tests.s3 import TREES

# (root, path below the root, format, step) of every committed checkpoint; all of them are complete.
EXPECTED = {
    "nvme-a": [
        ("llm/llama-tiny/step-100", "pytorch_dcp", 100),
        ("llm/llama-tiny/step-200", "pytorch_dcp", 200),
        ("vision/resnet-tiny/epoch=0-step=100.ckpt", "single_file", 100),
        ("vision/resnet-tiny/epoch=1-step=200.ckpt", "single_file", 200),
    ],
    "pfs": [
        ("llm/gpt-megatron/iter_0000200", "megatron", 200),
        ("llm/gpt-megatron/iter_0000300", "megatron_dist", 300),
        ("nlp/gpt2-tiny", "hf_safetensors", None),
        ("nlp/gpt2-tiny/checkpoint-100", "hf_trainer", 100),
        ("speech/ds-tiny/global_step100", "deepspeed", 100),
        ("speech/ds-tiny/global_step200", "deepspeed", 200),
    ],
    "bucket": [
        ("vision/vit-jax/400", "orbax", 400),
        ("vision/vit-jax/500", "orbax", 500),
    ],
}


# Files that belong to no checkpoint: trackers and DeepSpeed's helper script.
UNCLAIMED = {
    "nvme-a": set(),
    "pfs": {
        "llm/gpt-megatron/latest_checkpointed_iteration.txt",
        "speech/ds-tiny/latest",
        "speech/ds-tiny/zero_to_fp32.py",
    },
    "bucket": set(),
}


def tree_files(tree: str) -> dict[str, bytes]:
    root = TREES / tree
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
