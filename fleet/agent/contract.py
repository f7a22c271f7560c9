"""The wire contract: the format, the API paths, the limits and the path rule that the agent and the server share.

The server imports these (``from fleet.agent import SHA256_HEX``...), so there is one definition of each."""

from __future__ import annotations

import re

__version__ = "0.1.0"
PROG = "ckptfleet-agent"
AGENT = f"{PROG}/{__version__}"
WIRE_FORMAT = "ckptfleet-inventory/1"
INVENTORIES_PATH = "/api/v1/inventories/"
DELETIONS_PATH = "/api/v1/agent/deletions/"
TRASH_DIR = ".ckptfleet-trash"  # below each root: soft-deleted files until the server says purge or restore
PULLS_PATH = "/api/v1/agent/promotions/"
OFFLOADS_PATH = "/api/v1/agent/offloads/"
OFFLOADS_SIGN_PATH = "/api/v1/agent/offloads/sign/"
MAX_PATH_BYTES = 4096
MAX_LINE_BYTES = 4 * 1024 * 1024  # the server's default CKPTFLEET_INVENTORY_MAX_LINE
# The server's own path rules (fleet/ingest.py check_path); anything else fails the whole inventory.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
REFUSED_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f\\\ud800-\udfff]")
SINGLE_PART_ETAG = re.compile(r"^[0-9a-f]{32}$")  # an MD5; a multipart upload's ETag ends in -N and is none
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")  # a file line's "sha256" (wire contract)


def path_problem(path: object) -> str:
    """Why ``path`` is not a file line's path under the wire contract, or "" when it is one: a non-empty relative
    path below the root, at most ``MAX_PATH_BYTES`` of UTF-8, no NUL, control character or backslash, no empty, "."
    or ".." component. The agent checks what it sends and what the server asks of it; the server imports this."""
    if not isinstance(path, str) or not path:
        return "path must be a non-empty string"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"path is longer than {MAX_PATH_BYTES} bytes"
    if _CONTROL_CHARS.search(path):
        return "path contains a NUL or control character"
    if path.startswith("/"):
        return "path must be relative to the root, not absolute"
    if "\\" in path:
        return "path contains a backslash"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"path has an empty, '.' or '..' component: {path!r}"
    if REFUSED_PATH_CHARS.search(path):  # what is left of them: a lone surrogate
        return "path is not valid UTF-8"
    return ""


LEASES_PATH = "/api/v1/agent/leases/"
