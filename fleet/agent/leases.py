"""``ckptfleet-agent lease take|renew|release``: while a lease is live nothing deletes or demotes its checkpoint."""

from __future__ import annotations

import argparse
import json
import os

from .common import AgentError
from .contract import LEASES_PATH
from .wire import check_server, post_json, read_token

LEASE_PURPOSES = ("resuming", "evaluating", "exporting", "other")


def _lease_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptfleet-agent lease",
        description="Take, renew or release a lease on a checkpoint this host holds a copy of: while it is live "
        "nothing deletes or demotes the checkpoint. Prints the lease as JSON (take: its id).",
    )
    parser.add_argument("action", choices=("take", "renew", "release"))
    parser.add_argument("target", type=int, metavar="ID", help="take: the checkpoint's id; renew/release: the lease's")
    parser.add_argument("--owner", default="", help="take: who uses it, e.g. the job's name")
    parser.add_argument("--purpose", choices=LEASE_PURPOSES, default="resuming", help="take (default: %(default)s)")
    parser.add_argument("--ttl", type=int, default=3600, metavar="SECONDS", help="take/renew (default: %(default)s)")
    parser.add_argument("--server", default=os.environ.get("CKPTFLEET_SERVER"), help="default: $CKPTFLEET_SERVER")
    parser.add_argument("--token-file", help="file holding the host token (default: $CKPTFLEET_TOKEN_FILE)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS")
    return parser


def lease_command(argv: list[str]) -> int:
    """``ckptfleet-agent lease take|renew|release``: one call to the server, with the host's token."""
    args = _lease_parser().parse_args(argv)
    server, token = check_server(args.server), read_token(args)
    if args.action == "take":
        if not args.owner.strip():
            raise AgentError("lease take needs --owner: the job or person using the checkpoint")
        path = LEASES_PATH
        doc = {"checkpoint": args.target, "owner": args.owner, "purpose": args.purpose, "ttl_seconds": args.ttl}
    else:
        path = f"{LEASES_PATH}{args.target}/{args.action}/"
        doc = {"ttl_seconds": args.ttl} if args.action == "renew" else {}
    answer = post_json(path, server, token, doc, timeout=args.timeout, ok=(200, 201))
    print(json.dumps(answer, sort_keys=True), flush=True)
    return 0
