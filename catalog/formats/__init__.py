"""The registry of checkpoint formats.

``FORMATS`` holds one instance of every format, sorted by priority (lowest first): the order in which
``catalog.recognition.recognize`` offers each directory to them. Adding a format is adding a module with
a ``CheckpointFormat`` subclass and one line to ``_ALL`` below; the list is explicit, not discovered, so
that the order and the set of formats can be read here.
"""

from __future__ import annotations

from catalog.formats import dcp, deepspeed, hf, megatron, orbax, sidecar, single_file
from catalog.formats.base import CheckpointFormat

_ALL: list[CheckpointFormat] = [
    sidecar.SidecarFormat(),  # 0: ckptfleet.json, the writer's own manifest, enriches whatever is below
    megatron.MegatronLegacyFormat(),  # 10: iter_NNNNNNN/mp_rank_XX/
    megatron.MegatronDistFormat(),  # 11: iter_NNNNNNN/ torch_dist, NeMo distributed
    deepspeed.DeepSpeedFormat(),  # 20: global_stepN/
    hf.HFTrainerFormat(),  # 30: checkpoint-N/
    hf.HFSafetensorsFormat(),  # 35: model-0000i-of-0000n.safetensors + index
    orbax.OrbaxFormat(),  # 40: {step}/_CHECKPOINT_METADATA
    dcp.DCPFormat(),  # 50: .metadata + __R_i.distcp (torchtitan step-N, Lightning FSDP, ...)
    single_file.SingleFileFormat(),  # 90: .ckpt/.pt/.pth/.safetensors/.nemo files left over
]

FORMATS: list[CheckpointFormat] = sorted(_ALL, key=lambda fmt: fmt.priority)

# {name: label} of every format a Found can carry, for choices and pages.
FORMAT_LABELS: dict[str, str] = {fmt.name: fmt.label or fmt.name for fmt in FORMATS}

__all__ = ["FORMATS", "FORMAT_LABELS", "CheckpointFormat"]
