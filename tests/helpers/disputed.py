"""Disputed copies built through the real path: DCP inventories with the sha256s of made-up contents."""

from __future__ import annotations

import hashlib

from catalog.models import CheckpointCopy

FLIPPED = {"__1_0.distcp": "one flipped byte"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def dcp(step: int, *, run: str = "llama-7b", **contents: str) -> list[dict]:
    """A DCP checkpoint as the agent reports it, with the sha256s of made-up contents."""
    base = f"llm/{run}/step-{step}"
    values = {"__0_0.distcp": "rank 0", "__1_0.distcp": "rank 1", **contents}
    files = [
        {
            "path": f"{base}/.metadata",
            "size": 900,
            "mtime": 1763700000.0,
            "facts": {"kind": "dcp_metadata", "files": dict.fromkeys(values, 4096)},
            "sha256": sha("metadata"),
        }
    ]
    files += [
        {"path": f"{base}/{name}", "size": 4096, "mtime": 1763699990.0, "sha256": sha(value)}
        for name, value in values.items()
    ]
    return files


def copy_at(kit, step: int) -> CheckpointCopy:
    return CheckpointCopy.objects.select_related("checkpoint__run", "location").get(
        location=kit.location, checkpoint__step=step, gone_at__isnull=True
    )
