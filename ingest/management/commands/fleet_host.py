"""Register hosts and their checkpoint roots, and issue or rotate their agent tokens.

    manage.py fleet_host add gpu-a01 --site dc1 --region eu-west --gpus 8 --root /mnt/nvme0/checkpoints --tier nvme
    manage.py fleet_host set-gpus gpu-a01 8        # the GPUs it has ("none" clears it)
    manage.py fleet_host add-root gpu-a01 /lustre/ckpt --kind pfs --tier pfs --template '{team}/{run}'
    manage.py fleet_host rotate-token gpu-a01
    manage.py fleet_host list
    manage.py fleet_host down gpu-a01 --reason "node failure, INC-4211"   # its copies leave the restore ranking
    manage.py fleet_host up gpu-a01 --reason "repaired"

A token is printed once, to stdout only; the server keeps its sha256.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from catalog.models import Team
from ckptfleet.errors import DomainError
from ckptfleet.rules import name_problem
from fleet.choices import LocationKind, Tier
from fleet.models import Host
from fleet.services import (
    host_gpus_set,
    host_mark_down,
    host_mark_up,
    host_register,
    host_token_issue,
    location_add,
)


class Command(BaseCommand):
    help = "Register hosts and roots, and issue agent tokens."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="register a host (and its roots) and print its token")
        add.add_argument("name")
        add.add_argument("--site", default="")
        add.add_argument("--region", default="")
        add.add_argument("--description", default="")
        add.add_argument("--gpus", default=None, help="the GPUs it has (a run's GPUs when nothing else says)")
        self._root_options(add, repeat=True)
        gpus = sub.add_parser("set-gpus", help="set the GPUs a host has ('none' clears it)")
        gpus.add_argument("name")
        gpus.add_argument("gpus")
        add_root = sub.add_parser("add-root", help="register one more checkpoint root of a host")
        add_root.add_argument("name")
        add_root.add_argument("path")
        self._root_options(add_root, repeat=False)
        rotate = sub.add_parser("rotate-token", help="issue a new token and revoke the old ones")
        rotate.add_argument("name")
        sub.add_parser("list", help="list hosts and their roots")
        for name, text in (
            ("down", "mark a host down: its copies leave the restore ranking"),
            ("up", "mark it up again"),
        ):
            state = sub.add_parser(name, help=text)
            state.add_argument("name")
            state.add_argument("--reason", required=(name == "down"), default="")

    def _root_options(self, parser, *, repeat: bool) -> None:
        if repeat:
            parser.add_argument("--root", action="append", default=[], help="absolute checkpoint root (repeatable)")
        parser.add_argument("--kind", choices=[LocationKind.NVME, LocationKind.PFS], default=LocationKind.NVME)
        parser.add_argument("--tier", choices=Tier.values, default=None, help="defaults to the kind")
        parser.add_argument("--template", default="{team}/{run}", help="layout below the root, e.g. {team}/{run}")
        parser.add_argument("--team", default="", help="team for runs the template does not name")

    def handle(self, *args, **opts):
        actor = Actor.command(label="manage.py fleet_host")
        try:
            if opts["action"] == "add":
                host = host_register(
                    name=opts["name"],
                    site=opts["site"],
                    region=opts["region"],
                    description=opts["description"],
                    gpus=opts["gpus"],
                    actor=actor,
                )
                for root in opts["root"]:
                    self._add_root(host, root, opts, actor)
                self._print_token(host, host_token_issue(host=host, actor=actor))
            elif opts["action"] == "add-root":
                self._add_root(self._host(opts["name"]), opts["path"], opts, actor)
            elif opts["action"] == "rotate-token":
                host = self._host(opts["name"])
                self._print_token(host, host_token_issue(host=host, actor=actor))
            elif opts["action"] == "list":
                self._list()
            elif opts["action"] == "set-gpus":
                value = None if opts["gpus"].strip().lower() in ("none", "") else opts["gpus"]
                host = host_gpus_set(host=self._host(opts["name"]), gpus=value, actor=actor)
                self.stdout.write(f"{host.name}: {host.gpus if host.gpus is not None else 'no'} GPUs registered")
            elif opts["action"] in ("down", "up"):
                service = host_mark_down if opts["action"] == "down" else host_mark_up
                host = service(host=self._host(opts["name"]), reason=opts["reason"], actor=actor)
                state = f"down since {host.down_since.isoformat(timespec='seconds')}" if host.down_since else "up"
                self.stdout.write(f"{host.name}: {state}")
        except DomainError as exc:
            raise CommandError(exc.message) from None

    def _host(self, name: str) -> Host:
        host = Host.objects.filter(name=name).first()
        if host is None:
            raise CommandError(f"no host named {name!r}; register it with `fleet_host add {name}`")
        return host

    def _add_root(self, host: Host, root: str, opts, actor: Actor) -> None:
        team = None
        if opts.get("team"):
            if problem := name_problem(opts["team"], "team", Team._meta.get_field("name").max_length):
                raise CommandError(problem)
            team, _ = Team.objects.get_or_create(name=opts["team"])
        location = location_add(
            host=host,
            name=f"{host.name}:{root.rstrip('/') or '/'}",
            kind=opts["kind"],
            tier=opts["tier"] or opts["kind"],
            root_path=root,
            path_template=opts["template"],
            default_team=team,
            actor=actor,
        )
        self.stdout.write(f"registered root {location.root_path} of {host.name} ({location.get_tier_display()})")

    def _print_token(self, host: Host, token: str) -> None:
        self.stdout.write(f"token for {host.name} (shown once; earlier tokens are revoked):")
        self.stdout.write(token)

    def _list(self) -> None:
        hosts = Host.objects.prefetch_related("locations").order_by("name")
        if not hosts:
            self.stdout.write("no hosts registered yet; add one with `manage.py fleet_host add NAME --root PATH`")
        for host in hosts:
            seen = host.last_seen_at.isoformat() if host.last_seen_at else "never"
            gpus = host.gpus if host.gpus is not None else "-"
            self.stdout.write(
                f"{host.name}  site={host.site or '-'} region={host.region or '-'} gpus={gpus} last seen {seen}"
            )
            for loc in host.locations.all():
                self.stdout.write(f"    {loc.root_path}  {loc.kind}/{loc.tier}  template {loc.path_template}")
