"""Inventories for the ingest tests: a DCP checkpoint as the agent reports it, and the upload through the API."""

from __future__ import annotations

URL = "/api/v1/inventories/"


def dcp(step: int, ranks: int = 2, *, missing: int | None = None, run: str = "llama-7b") -> list[dict]:
    """Files of a DCP checkpoint with its .metadata facts (as the agent reads them)."""
    base = f"llm/{run}/step-{step}"
    names = {f"__{r}_0.distcp": 4096 for r in range(ranks)}
    files = [
        {
            "path": f"{base}/.metadata",
            "size": 900,
            "mtime": 1763700000.0 + step,
            "facts": {"kind": "dcp_metadata", "files": names},
        }
    ]
    for r in range(ranks):
        if r != missing:
            files.append({"path": f"{base}/__{r}_0.distcp", "size": 4096, "mtime": 1763699990.0 + step})
    return files


def post(client, kit, body: bytes, *, auth: dict | None = None, **extra):
    headers = kit.auth() if auth is None else auth
    return client.post(
        URL, data=body, content_type="application/x-ndjson", HTTP_CONTENT_ENCODING="gzip", **headers, **extra
    )
