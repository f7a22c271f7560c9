"""The command line: the options, the checks made before anything is sent, one root after the other, and
``main``, whose exit status is 0 when all went well, 1 when something failed and 2 for a usage error."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from collections.abc import Callable
from typing import IO, Any

from .cache import DEFAULT_CACHE, DEFAULT_SCRUB_RATE, ChecksumCache
from .common import MIB, AgentError, one_line
from .contract import AGENT, PROG, REFUSED_PATH_CHARS
from .crc import checksums_note
from .deletions import delete_root
from .leases import lease_command
from .offloads import DEFAULT_JOBS, offload_root
from .pulls import pull_root
from .upload import send_root
from .walk import check_root, inventory_lines, write_lines
from .wire import check_server, read_token


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        if message.startswith("unrecognized arguments"):
            # Only option names are echoed: a misplaced value might be a secret.
            names = [word for word in message.split(":", 1)[1].split() if word.startswith("-")]
            message = "unrecognized arguments" + (f": {' '.join(names)}" if names else "")
        print(f"{PROG}: {one_line(message)} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Report the checkpoint files below this host's roots to a Checkpoint Fleet server.",
        epilog="The token comes from CKPTFLEET_TOKEN, or from the file named by --token-file or "
        "CKPTFLEET_TOKEN_FILE; never from the command line.",
        allow_abbrev=False,  # else "--token SECRET" would be taken as --token-file and echoed back
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("CKPTFLEET_SERVER"),
        help="server base URL (default: $CKPTFLEET_SERVER)",
    )
    parser.add_argument("--token-file", help="file holding the host token (default: $CKPTFLEET_TOKEN_FILE)")
    parser.add_argument("--token", nargs="?", const="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--host", default=socket.gethostname(), help="this host's registered name (default: %(default)s)"
    )
    parser.add_argument(
        "--root",
        action="append",
        required=True,
        metavar="PATH",
        help="a registered root to report; repeat for more (one inventory each)",
    )
    parser.add_argument(
        "--checksums",
        action="store_true",
        help="send the sha256 and CRCs of every file (crc32; crc32c and crc64nvme with the optional module awscrt), "
        "whole and per block, and check the CRC32 of every member of torch.save zips; cached, so an unchanged "
        "file is read once",
    )
    parser.add_argument(
        "--scrub-share",
        type=_fraction,
        default=0.0,
        metavar="FRACTION",
        help="with --checksums, also re-read about this share of each root's bytes (the files whose checksums "
        "are oldest), ignoring the cache, to find bit rot: e.g. 0.05 daily verifies every file every ~20 days "
        "(default: %(default)g, off)",
    )
    parser.add_argument(
        "--scrub-rate",
        type=_positive,
        default=DEFAULT_SCRUB_RATE,
        metavar="MIB_PER_S",
        help="read scrubbed files at most this fast, so training I/O does not suffer; first-time hashing "
        "is not throttled (default: %(default)g)",
    )
    parser.add_argument(
        "--cache", default=DEFAULT_CACHE, metavar="PATH", help="checksum cache, SQLite (default: %(default)s)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the NDJSON lines to stdout instead of sending them"
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="after the upload, wait until the server has applied or failed the inventory",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="give up waiting after this long (default: %(default)g)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="network timeout of each request (default: %(default)g)",
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="report a root with no files as empty (else the server refuses it, as an unmounted disk looks so)",
    )
    parser.add_argument(
        "--deletions",
        action="store_true",
        help="instead of reporting, delete the files the server scheduled for deletion below these roots "
        "(each checked for size and mtime first) and report what was done",
    )
    parser.add_argument(
        "--pulls",
        action="store_true",
        help="instead of reporting, pull the files the server asked this host to fetch into these roots "
        "(promotions): each checked for size and checksum, never replacing a file; report each, then the root. "
        "With --dry-run: say what would be pulled, write and report nothing",
    )
    parser.add_argument(
        "--offloads",
        action="store_true",
        help="instead of reporting, upload the files the server asked this host to move to a bucket (offloads) "
        "with the presigned URLs it signs: each read once for its sha256 and MD5, never replacing an object; "
        "report each. With --dry-run: say what would be uploaded, send and report nothing",
    )
    parser.add_argument(
        "--jobs",
        type=_count,
        default=DEFAULT_JOBS,
        metavar="N",
        help="with --offloads, upload this many files at once (default: %(default)s)",
    )
    parser.add_argument("--version", action="version", version=AGENT)
    return parser


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be between 1 and 64, not {text}")
    return value


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _open_cache(args: argparse.Namespace) -> ChecksumCache:
    print(f"{PROG}: {checksums_note()}", file=sys.stderr, flush=True)
    if args.scrub_share:
        print(
            f"{PROG}: scrubbing: re-reading the {args.scrub_share:.1%} of each root's bytes checksummed longest ago, "
            f"at most {args.scrub_rate:g} MiB/s",
            file=sys.stderr,
            flush=True,
        )
    return ChecksumCache(args.cache, scrub_share=args.scrub_share, scrub_rate=args.scrub_rate * MIB)


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "lease":
        return lease_command(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.scrub_share and not args.checksums:
        parser.error("--scrub-share needs --checksums: scrubbing re-reads files to renew their checksums")
    if args.token is not None:
        raise AgentError("--token is not accepted: put the token in CKPTFLEET_TOKEN or a --token-file")
    if not args.host or REFUSED_PATH_CHARS.search(args.host):
        raise AgentError("--host must be a plain host name")
    roots = list(dict.fromkeys(os.path.abspath(root) for root in args.root))
    for root in roots:
        check_root(root)  # all roots are checked before anything is sent: a typo is a config error
    server = token = None
    chosen = [name for name in ("deletions", "pulls", "offloads") if getattr(args, name)]
    if len(chosen) > 1:
        raise AgentError(f"--{' and --'.join(chosen)} do not go together: run one, then the other")
    if not args.dry_run or args.pulls or args.offloads:
        server = check_server(args.server)
        token = read_token(args)
    if args.offloads:
        failed = _for_each_root(roots, lambda root: offload_root(args, root, server or "", token or ""))
        return 1 if failed else 0
    if args.pulls:
        return _pulls(args, roots, server or "", token or "")
    if args.deletions:
        if args.dry_run:
            raise AgentError("--deletions and --dry-run do not go together")
        failed = _for_each_root(roots, lambda root: delete_root(args, root, server or "", token or ""))
        return 1 if failed else 0
    cache = _open_cache(args) if args.checksums else None
    try:
        if args.dry_run:
            out = getattr(sys.stdout, "buffer", None)
            sys.stdout.flush()
            for root in roots:
                lines = inventory_lines(
                    root, args.host, checksums=args.checksums, cache=cache, allow_empty=args.allow_empty
                )
                if out is not None:
                    write_lines(lines, out)
                else:
                    write_lines(lines, _TextOut(sys.stdout))
            if out is not None:
                out.flush()
            return 0
        failed = _for_each_root(roots, lambda root: send_root(args, root, server or "", token or "", cache))
    finally:
        if cache is not None:
            cache.close()
    return 1 if failed else 0


def _for_each_root(roots: list[str], work: Callable[[str], bool | None]) -> bool:
    """Run ``work`` on each root in turn; return whether any failed (raised, or answered False).

    A root's failure is reported and the next root is still done, unless the error is fatal (the
    server refused the token, say), which would fail every other root the same way.
    """
    failed = False
    for root in roots:
        try:
            failed = work(root) is False or failed
        except AgentError as exc:
            failed = True
            _error(str(exc))
            if exc.fatal:
                break
    return failed


def _pulls(args: argparse.Namespace, roots: list[str], server: str, token: str) -> int:
    cache = _open_cache(args) if args.checksums and not args.dry_run else None
    try:
        failed = _for_each_root(roots, lambda root: pull_root(args, root, server, token, cache))
    finally:
        if cache is not None:
            cache.close()
    return 1 if failed else 0


class _TextOut:
    """Lets byte lines go to a text-only stdout (when tests or IDEs replace sys.stdout)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))


def _error(message: str) -> None:
    print(f"{PROG}: {one_line(message, 1000)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; return the exit status (0 ok, 1 failure, 2 usage error)."""
    try:
        return _run(argv)
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except AgentError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # stdout went away (``--dry-run | head``): nothing left to report to.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if os.environ.get("CKPTFLEET_AGENT_DEBUG"):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (set CKPTFLEET_AGENT_DEBUG=1 for a traceback)")
        return 1
