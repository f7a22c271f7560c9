"""The demo's host agents: the real agent code, over HTTP, for each demo host, every so often.

    manage.py demo_agents --server http://127.0.0.1:8000/      (what `make demo` runs beside the server)

On a real fleet each GPU host runs ``ckptfleet-agent`` from cron or a systemd timer. The demo's hosts are folders
under ``var/demo/``; this command plays their agents so that what a person starts in the demo is carried out:
every ``--every`` seconds each host's agent deletes the files of deletions that started (``--deletions``),
pulls what promotions asked for (``--pulls``) and uploads what offloads asked for (``--offloads``); every
``--report-every`` seconds it reports its roots again (an inventory, as the agent's timer would). Each host gets a
fresh token at start (``fleet.services.host_token_issue``: audited, earlier ones revoked), held in memory only.
Development only (``CKPTFLEET_DEBUG=1``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from dashboard import periodic
from dashboard.management.commands.seed_demo import demo_filesystem
from fleet import agent
from fleet.agent import walk as agent_walk
from fleet.models import Host, StorageLocation
from fleet.services import host_token_issue

_DID = re.compile(r"\b[1-9][\d,]* (deleted|trashed|pulled|uploaded|refused|failed|skipped)\b")

# The demo host whose shard files are sparse (tens of TB that use no disk): reported without checksums.
SPARSE_HOSTS = {"gpu-c12"}


class Command(BaseCommand):
    help = "Play the demo hosts' agents (development only): deletions, pulls, offloads and reports, on a timer."

    def add_arguments(self, parser):
        parser.add_argument("--server", required=True, help="the demo server's URL, e.g. http://127.0.0.1:8000/")
        parser.add_argument("--dir", default=str(Path(settings.VAR_DIR) / "demo"), help="where the demo trees are")
        parser.add_argument("--every", type=float, default=20.0, help="seconds between action passes (default 20)")
        parser.add_argument("--report-every", type=float, default=600.0, help="seconds between inventories")
        parser.add_argument("--once", action="store_true", help="one pass of everything, then exit")

    def handle(self, *args, **opts):
        if not settings.DEBUG:
            raise CommandError("demo_agents plays the demo's hosts; it runs only with CKPTFLEET_DEBUG=1")
        base = str(Path(opts["dir"]).resolve())
        hosts = {}
        for host in Host.objects.filter(locations__root_path__startswith=base).distinct().order_by("name"):
            roots = [loc.root_path for loc in host.locations.filter(root_path__startswith=base).order_by("pk")]
            token = host_token_issue(host=host, actor=Actor.command(label="manage.py demo_agents"))
            hosts[host.name] = (roots, token)
        if not hosts:
            raise CommandError(f"no demo host has a root below {base}; run `manage.py seed_demo` first")
        stopping = periodic.stop_on_signals() if not opts["once"] else threading.Event()
        self.stdout.write(f"demo_agents: {len(hosts)} hosts ({', '.join(hosts)}) reporting to {opts['server']}")
        self.stdout.flush()
        try:
            self._loop(hosts, opts, stopping)
        except KeyboardInterrupt:  # Ctrl-C or a SIGTERM, even mid-pass: the agent's work survives being stopped
            pass
        self.stdout.write("demo_agents: stopped")

    def _loop(self, hosts: dict, opts, stopping: threading.Event) -> None:
        last_report = time.monotonic()
        while True:
            report = opts["once"] or time.monotonic() - last_report >= opts["report_every"]
            for name, (roots, token) in hosts.items():
                if stopping.is_set():
                    return
                self._pass(name, roots, token, opts["server"], report=report)
            if report:
                last_report = time.monotonic()
            if opts["once"]:
                return
            time.sleep(opts["every"])

    def _pass(self, name: str, roots: list[str], token: str, server: str, *, report: bool) -> None:
        common = ["--server", server, "--host", name, *(a for root in roots for a in ("--root", root))]
        passes = [("deletions", ["--deletions"]), ("pulls", ["--pulls"]), ("offloads", ["--offloads"])]
        if report:
            checksums = [] if name in SPARSE_HOSTS else ["--checksums", "--cache", self._cache()]
            passes.append(("report", [*checksums, "--allow-empty"]))
        for label, extra in passes:
            said = io.StringIO()
            with (
                _token(token),
                _demo_disks(name),
                contextlib.redirect_stdout(said),
                contextlib.redirect_stderr(said),
            ):
                status = agent.main([*common, *extra])
            if status == 130:  # the agent was interrupted (Ctrl-C, SIGTERM): so is this
                raise KeyboardInterrupt
            words = " ".join(said.getvalue().split())
            if status != 0:
                self.stderr.write(f"demo_agents: {name} {label} failed ({status}): {words[-500:]}")
            elif label == "report" or _DID.search(words):  # a pass with nothing to do stays quiet
                self.stdout.write(f"demo_agents: {name} {label}: {words[-300:]}")
        self.stdout.flush()

    def _cache(self) -> str:
        return str(Path(settings.VAR_DIR) / "demo-checksums.sqlite3")


@contextlib.contextmanager
def _token(token: str):
    """The agent reads its token from CKPTFLEET_TOKEN (never the command line); set it for one call."""
    before = os.environ.get("CKPTFLEET_TOKEN")
    os.environ["CKPTFLEET_TOKEN"] = token
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CKPTFLEET_TOKEN", None)
        else:
            os.environ["CKPTFLEET_TOKEN"] = before


@contextlib.contextmanager
def _demo_disks(host_name: str):
    """The demo's roots are folders on one development disk: measured as they are, every host would report that
    disk. For one call, the agent measures each root as the hardware the demo plays (``seed_demo.demo_filesystem``:
    7.68 TB NVMe drives, a 2 PB Lustre), from what the root held at its last inventory; the figures still travel
    the agent's header and the server's checks as any agent's do."""
    # Replaced where the walk looks it up (fleet.agent.walk), not on the package that re-exports it.
    real = agent_walk.filesystem_space

    def measured(root: str) -> dict[str, int]:
        location = StorageLocation.objects.filter(host__name=host_name, root_path=root).select_related("last_inventory")
        loc = location.first()
        if loc is None:
            return real(root)
        held = loc.last_inventory.bytes_total if loc.last_inventory and loc.last_inventory.status == "applied" else 0
        size, free = demo_filesystem(host_name, loc.kind, held)
        return {"fs_size_bytes": size, "fs_free_bytes": free}

    agent_walk.filesystem_space = measured  # type: ignore[assignment]
    try:
        yield
    finally:
        agent_walk.filesystem_space = real  # type: ignore[assignment]
