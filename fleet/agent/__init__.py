"""ckptfleet-agent: report the checkpoint files below this host's roots to a Checkpoint Fleet server.

The agent walks each root it is given, reads a few small facts from the files that checkpoint
formats use as manifests (DCP ``.metadata``, safetensors headers, HF index files, trainer state,
tracker files, the tail of ``torch.save`` zips), optionally hashes file contents, and uploads one
inventory per root as gzip-compressed NDJSON (see ``docs/wire-format.md``). It reports facts; the
server judges what is complete.

It needs only the Python standard library (3.8 or newer). Its modules are small (walk, facts, crc,
checksums, cache, wire, upload, deletions, store, pulls, offloads, leases, cli); ``make agent`` builds them
into one file, ``dist/ckptfleet-agent.pyz`` (a zipapp, scripts/build_agent.py), that can be copied onto a
locked-down GPU host and run as ``python3 ckptfleet-agent.pyz``. Installed with the project the same
code is ``ckptfleet-agent``, and in a checkout ``python -m fleet.agent``.

Usage::

    export CKPTFLEET_SERVER=https://fleet.example.com
    export CKPTFLEET_TOKEN_FILE=/etc/ckptfleet/token        # or CKPTFLEET_TOKEN=cfh_...
    ckptfleet-agent --root /mnt/nvme0/checkpoints --root /mnt/nvme1/checkpoints [--checksums] [--wait]
    ckptfleet-agent --root /mnt/nvme0/checkpoints --checksums --scrub-share 0.05  # and re-verify 5% of the bytes
    ckptfleet-agent --root /mnt/nvme0/checkpoints --dry-run   # print the NDJSON, contact nobody
    ckptfleet-agent --root /mnt/nvme0/checkpoints --deletions # delete what the server scheduled, report back
    ckptfleet-agent --root /mnt/nvme0/checkpoints --pulls     # fetch what promotions asked for, report back
    ckptfleet-agent --root /mnt/nvme0/checkpoints --offloads  # upload what offloads move to a bucket, report back
    ckptfleet-agent lease take 42 --owner resume-job-7 --ttl 3600   # nothing deletes or demotes it meanwhile
    ckptfleet-agent lease renew 5 --ttl 3600; ckptfleet-agent lease release 5

The token is never taken from the command line (it would show in ``ps`` and shell history) and is
never printed. Every error is one line on stderr starting with ``ckptfleet-agent:`` and the exit
status is non-zero: 1 when something failed, 2 for a usage error.

What is reported and what is skipped:

- one ``file`` line per regular file below the root, in path order; symlinks (even ``last.ckpt``
  style ones) and special files are skipped and never followed;
- a name the server would refuse (not valid UTF-8, a control character or a backslash, a path over
  4096 bytes) is skipped with a warning on stderr, and so is a directory that cannot be read or a
  file that vanishes during the walk: one odd entry must not cost the host its whole inventory, and
  a missing file makes the server see a checkpoint as less complete, never more;
- the root itself is given as an absolute path with symlinks left as they are, because it must
  match a registered root exactly; it must exist, else nothing is sent.

With ``--pulls`` the agent fetches the files promotions asked this host for (``/api/v1/agent/promotions/``):
each is downloaded from its presigned URL into ``.ckptfleet-pull-<random>.tmp`` beside its target,
checked (size; sha256 when the server knows it; the MD5 of a single-part ETag, never of a multipart
``...-N`` one), fsynced and linked to its name, never replacing an existing file (an identical one
counts as pulled). Paths must be plain relative paths below the root with no symlink on the way. Each
file is reported back; a root that received files is then reported (an inventory) as usual. Trouble
that may pass (the network, the store's 5xx, an expired URL) leaves the file for the next run.

With ``--offloads`` the agent uploads the files offloads asked of this host (``/api/v1/agent/offloads/``)
with URLs the server signs, so the host needs no S3 credentials: ``--jobs`` files at once (default 8),
each read once for its sha256 and MD5 while it is sent, by one PUT that the store refuses if the key
exists (If-None-Match: *) or, for a large file, part by part into a multipart upload the server started
and completes. A part the store holds already (a killed run) is read but not sent again. Paths must be
plain relative paths below the root, with no symlink on the way or at the end. Each file is reported;
the server checks the store's copy before counting it. Trouble that may pass is retried, then left.

With ``--checksums`` every file is read once for its sha256 and, in the same pass, its CRCs: crc32
(zlib) always, crc32c and crc64nvme when the optional module ``awscrt`` imports (``pip install
awscrt``; the agent says on stderr which it computes). Beside the whole-file CRCs it sends the CRC32
(and CRC32C) of every 1 MiB block (2, 4, ... MiB for files over 10,000 MiB), which the server
combines into the composite checksum S3 keeps for a multipart upload (boto3, the aws CLI, s5cmd,
rclone): so a host copy can be compared with a bucket copy. The CRCs run on a worker thread while
sha256 runs on the reading one (a small file's while the walk reads the next files). For a
``torch.save`` zip the CRC32 of every member is checked against the one its zip headers record, from
the same bytes (``members_checked``, ``members_bad`` in its facts). Results are cached in SQLite
keyed by (device, inode, size, mtime_ns), so an unchanged file is never read again; a file that
changes while it is read is sent without checksums. Each line says when its checksums were taken
(``checksummed_at``).

Bit rot does not change a file's mtime, so cached checksums go stale. ``--scrub-share 0.05`` re-reads,
in each root, the files whose checksums are oldest, about 5% of the root's bytes per run, at most
``--scrub-rate`` MiB/s (default 200, so training I/O does not suffer; first-time hashing is not
throttled), and sends what it finds; a file whose content changed without a new mtime is named on
stderr ("content changed without a new mtime: bit rot or an in-place write"). Run daily, every file
is verified again within about 20 days, e.g. from cron::

    17 3 * * * ckptfleet ckptfleet-agent --root /mnt/nvme0/checkpoints --checksums --scrub-share 0.05 --scrub-rate 200
"""

from __future__ import annotations

from .cache import CachedChecksums, ChecksumCache
from .checksums import FileChecksums, checksum_file, sha256_file
from .cli import main
from .common import AgentError
from .contract import (
    AGENT,
    MAX_LINE_BYTES,
    MAX_PATH_BYTES,
    REFUSED_PATH_CHARS,
    SHA256_HEX,
    TRASH_DIR,
    WIRE_FORMAT,
    __version__,
    path_problem,
)
from .crc import CRC_ALGORITHMS, crc_block_size, crc_combine, crc_of_blocks, zip_members
from .deletions import delete_file
from .facts import facts_kind, file_facts, stream_facts
from .offloads import push_file
from .pulls import pull_file
from .store import StoreConnections
from .upload import upload_inventory, wait_for_inventory, write_inventory
from .walk import encode_line, filesystem_space, inventory_lines, scan_root

__all__ = [
    "AGENT",
    "CRC_ALGORITHMS",
    "MAX_LINE_BYTES",
    "MAX_PATH_BYTES",
    "REFUSED_PATH_CHARS",
    "SHA256_HEX",
    "TRASH_DIR",
    "WIRE_FORMAT",
    "AgentError",
    "CachedChecksums",
    "ChecksumCache",
    "FileChecksums",
    "StoreConnections",
    "__version__",
    "checksum_file",
    "crc_block_size",
    "crc_combine",
    "crc_of_blocks",
    "delete_file",
    "encode_line",
    "facts_kind",
    "file_facts",
    "filesystem_space",
    "inventory_lines",
    "main",
    "path_problem",
    "pull_file",
    "push_file",
    "scan_root",
    "sha256_file",
    "stream_facts",
    "upload_inventory",
    "wait_for_inventory",
    "write_inventory",
    "zip_members",
]
