"""The OpenAPI examples of the dashboard's API (``dashboard.api``): a list an operation, each example written once
and named by the views that show it (``ckptfleet.schema`` says why they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

from ckptfleet.schema import recorded

SHA256 = "9f2c4e1b7a0d3c5e8f6a2b4d1c7e9a3f5b8d0c2e4a6f1b3d5c7e9a0b2d4f6a8c"  # a file's sha256 in the agents' examples
RECEIVED = {"id": 31, "status": "received", "url": "/api/v1/inventories/31/"}  # an inventory received, to poll


def agent_report(name: str, *results: dict) -> list[OpenApiExample]:
    """What a host agent sends back about the files it was given: ``{"results": [...]}``."""
    return [OpenApiExample(name, value={"results": list(results)}, request_only=True)]


# --- the fleet (dashboard.api.fleet): inventories, hosts, locations and the host agents' work ---------------

INVENTORY_UPLOAD = [
    OpenApiExample(
        "Received: poll its URL until it is applied", value=RECEIVED, response_only=True, status_codes=["202"]
    )
]
HOST_DOWN = [
    OpenApiExample(
        'Sent {"reason": "PSU failure, vendor ticket 4411"}: the host, down',
        value=recorded(
            "hosts_retrieve",
            down_since="2026-11-27T09:12:00Z",
            down_label="ada",
            down_reason="PSU failure, vendor ticket 4411",
        ),
        response_only=True,
    )
]
HOST_UP = [
    OpenApiExample(
        'Sent {"reason": "PSU replaced"}: the host, up',
        value=recorded("hosts_retrieve", down_since=None, down_label="", down_reason=""),
        response_only=True,
    )
]
HOST_GPUS = [OpenApiExample('Sent {"gpus": 8}: the host', value=recorded("hosts_retrieve", gpus=8), response_only=True)]
LOCATION_SCAN = [OpenApiExample("A scan started", value=RECEIVED, response_only=True, status_codes=["202"])]
LOCATION_SOFT_DELETE = [
    OpenApiExample(
        'Sent {"days": 14, "reason": "two weeks to notice a wrong deletion"}: the location',
        value=recorded("locations_retrieve", soft_delete_days=14, trash_days=14),
        response_only=True,
    ),
    OpenApiExample(
        'Sent {"days": 1, ...}: a shortening waits for a second person',
        value={
            "change_request": 12,
            "state": "pending",
            "detail": "shortening the recovery window needs a second person's approval: see /approvals/",
        },
        response_only=True,
        status_codes=["202"],
    ),
]
AGENT_DELETIONS = [
    OpenApiExample(
        "One file to move to the trash (?can=trash)",
        value={
            "host": "gpu-a01",
            "items": [
                {
                    "id": 118,
                    "job": 4,
                    "root": "/mnt/nvme0/ckpt",
                    "path": "llm/llama-tiny/step-100/__0_0.distcp",
                    "size": 41943040,
                    "mtime": 1795694400.0,
                    "action": "trash",
                    "trash_path": ".ckptfleet-trash/4/llm/llama-tiny/step-100/__0_0.distcp",
                }
            ],
        },
        response_only=True,
    )
]
AGENT_DELETIONS_REPORT = [
    OpenApiExample(
        'Sent {"results": [{"id": 118, "result": "trashed"}, {"id": 119, "result": "failed", ...}]}',
        value={"recorded": 2, "ignored": 0, "done": 1, "blocked": 0, "failed": 1},
        response_only=True,
    )
]
AGENT_PULLS = [
    OpenApiExample(
        "One file to pull (the URL shortened)",
        value={
            "host": "gpu-a01",
            "items": [
                {
                    "id": 311,
                    "job": 9,
                    "root": "/mnt/nvme0/ckpt",
                    "path": "llm/llama-tiny/step-400/model.safetensors",
                    "target": "/mnt/nvme0/ckpt/llm/llama-tiny/step-400/model.safetensors",
                    "size": 268435456,
                    "etag": '"5d41402abc4b2a76b9719d911017c592-32"',
                    "sha256": SHA256,
                    "source": "s3://ckpt-archive-eu/llm/llama-tiny/step-400/model.safetensors",
                    "url": "https://s3.eu-west-1.amazonaws.com/ckpt-archive-eu/llm/llama-tiny/step-400/model.safetensors?X-Amz-Expires=3600&...",
                    "expires_in": 3600,
                }
            ],
            "unavailable": [],
        },
        response_only=True,
    )
]
AGENT_PULLS_REPORT = agent_report(
    "One file pulled, one failed",
    {"id": 311, "result": "pulled", "size": 268435456, "sha256": SHA256},
    {"id": 312, "result": "failed", "detail": "No space left on device"},
)
AGENT_OFFLOADS = [
    OpenApiExample(
        "One file to upload with a single PUT (the URL shortened)",
        value={
            "host": "gpu-a01",
            "items": [
                {
                    "id": 512,
                    "job": 14,
                    "root": "/mnt/nvme0/ckpt",
                    "path": "llm/llama-tiny/step-600/optim.pt",
                    "source": "/mnt/nvme0/ckpt/llm/llama-tiny/step-600/optim.pt",
                    "target": "s3://ckpt-archive-eu/llm/llama-tiny/step-600/optim.pt",
                    "size": 52428800,
                    "sha256": SHA256,
                    "method": "put",
                    "expires_in": 3600,
                    "url": "https://s3.eu-west-1.amazonaws.com/ckpt-archive-eu/llm/llama-tiny/step-600/optim.pt?X-Amz-Expires=3600&...",
                    "headers": {"x-amz-checksum-sha256": "nyxOG3oNPF6PaitNHH6aP1uNDC5Kbxs9x+mgstT2qMw="},
                }
            ],
            "unavailable": [],
        },
        response_only=True,
    )
]
AGENT_OFFLOADS_REPORT = agent_report(
    "One file uploaded, one already there",
    {"id": 512, "result": "uploaded", "size": 52428800, "sha256": SHA256},
    {"id": 513, "result": "skipped", "exists": True, "detail": "an object is at the key"},
)
AGENT_OFFLOADS_SIGN = [
    OpenApiExample("The sha256 the agent measured", value={"sign": [{"id": 512, "sha256": SHA256}]}, request_only=True)
]

# --- how a run ended (dashboard.api.lifecycle) --------------------------------------------------------------

RUN_STATUS = [
    OpenApiExample("A job that failed", value={"status": "failed", "reason": "NCCL timeout"}, request_only=True)
]
RUN_STATUS_BY_NAME = [
    OpenApiExample(
        "A job that reached its target",
        value={"team": "llm", "run": "llama-7b-pretrain", "status": "finished", "reason": "reached the target loss"},
        request_only=True,
    )
]

# --- recovery points and lineage (dashboard.api.recovery_point) ---------------------------------------------

RUN_GPUS = [OpenApiExample("512 GPUs", value={"gpus": 512, "reason": "scaled up for the long run"}, request_only=True)]
RUN_RPO = [OpenApiExample("Six hours", value={"hours": 6, "reason": "production pre-training"}, request_only=True)]
TEAM_RPO = [OpenApiExample("A day", value={"hours": 24, "reason": "research default"}, request_only=True)]
RUN_PARENT = [
    OpenApiExample(
        "Fine-tuned from a checkpoint",
        value={"checkpoint": 42, "reason": "SFT from the step 4000 base"},
        request_only=True,
    )
]

# --- the catalog (dashboard.api.views) ----------------------------------------------------------------------

RUN = {
    "id": 7,
    "team": "llm",
    "name": "llama-7b-pretrain",
    "status": "finished",
    "status_source": "api",
    "status_changed_at": "2026-11-20T04:12:09Z",
    "status_reason": "reached the target loss",
    "status_by_label": "ada",
    "checkpoint_count": 12,
    "copy_count": 27,
    "bytes": 1649267441664,
    "newest_step": 6000,
    "bad_copies": 1,
    "created_at": "2026-09-02T08:30:00Z",
}
RUN_LIST = [OpenApiExample("A page of runs of team llm", value=RUN, response_only=True)]
RUN_READ = [OpenApiExample("A finished run", value=RUN, response_only=True)]
RUN_RESUME = [
    OpenApiExample(
        "A DeepSpeed run whose latest is behind",
        value={
            "run": 7,
            "resume": {
                "checkpoint": 91,
                "label": "step 200",
                "step": 200,
                "verified": True,
                "copy": 140,
                "location": "lustre-gw1:lustre",
                "host": "lustre-gw1",
                "path": "/lustre/ckpt/speech/ds-tiny/global_step200",
                "restore_seconds": 41.3,
                "commands": ["rsync -a --partial ... ./global_step200/"],
                "layout": {"world_size": 2, "reshard": "conversion", "tool": "ds_to_universal.py ..."},
                "pointer": {"state": "behind", "fix_command": "printf '%s\\n' global_step200 > .../latest"},
                "lost_steps": 0,
                "lost_hours": 1.5,
                "lost_gpu_hours": 3.0,
            },
            "why": "the newest checkpoint that is verified; ...",
            "excluded": [],
            "ladder": [{"label": "step 100", "position": 2, "steps_lost": 100}],
        },
        response_only=True,
    ),
    OpenApiExample(
        "Every copy on a host that is marked down",
        value={
            "run": 12,
            "resume": None,
            "detail": "no checkpoint of this run has a complete copy on a reachable location",
            "lost_steps": 41000,
            "lost_hours": 96.0,
            "lost_gpu_hours": 49152.0,
            "excluded": [
                {
                    "checkpoint": 29,
                    "kind": "unreachable",
                    "why": "step 41000 is newer and complete, but not reachable: host gpu-c12 is marked down ...",
                }
            ],
            "ladder": [],
            "pointers": [],
        },
        response_only=True,
    ),
]
CHECKPOINTS_FLAGGED = [
    OpenApiExample(
        "Without flag: every flag with its count",
        value=[
            {
                "flag": "finished_on_nvme",
                "label": "Finished run still on NVMe",
                "help": "The run has ended (finished, failed or abandoned), its newest checkpoint was saved "
                "more than 14 days ago, and this checkpoint still has a copy on GPU-host NVMe, the most "
                "expensive tier, which training jobs need. Move it to object storage or delete that copy.",
                "count": 2,
            }
        ],
        response_only=True,
    ),
    OpenApiExample(
        "With ?flag=finished_on_nvme: a page of checkpoints",
        value={
            "next": None,
            "previous": None,
            "results": [
                {
                    "id": 35,
                    "run_id": 8,
                    "run": "nlp/llama2-7b-sft",
                    "step": 500,
                    "tag": "",
                    "importance": "routine",
                    "flag": "finished_on_nvme",
                    "why": "on NVMe at gpu-c12:nvme0",
                }
            ],
        },
        response_only=True,
    ),
]
