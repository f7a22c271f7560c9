"""Tiering policies from the shell: list them, preview one, run one now.

    manage.py tiering_policy list
    manage.py tiering_policy preview 3
    manage.py tiering_policy run 3 --reason "free NVMe before the next run starts"

A run asks for moves or host-copy deletions through the same services as the policy page; each waits for
approval and the grace period like any policy's. Creating and editing policies is on the page and the API.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from catalog.templatetags.fleet_format import bytes_iec
from ckptfleet.errors import DomainError
from retention import tiering_policies as policies
from retention.models import TieringPolicy


class Command(BaseCommand):
    help = "List, preview or run tiering policies."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="do", required=True)
        sub.add_parser("list", help="every tiering policy, with its rule and last run")
        preview = sub.add_parser("preview", help="what a run would ask for now (changes nothing)")
        preview.add_argument("policy", type=int)
        run = sub.add_parser("run", help="run an enabled policy now (audited)")
        run.add_argument("policy", type=int)
        run.add_argument("--reason", default="run from the shell")

    def handle(self, *args, **opts):
        if opts["do"] == "list":
            for p in TieringPolicy.objects.select_related("team", "run__team", "target_location"):
                state = "enabled" if p.enabled else "disabled"
                last = p.last_run_at.isoformat(timespec="seconds") if p.last_run_at else "never"
                self.stdout.write(f"{p.pk}\t{p.name}\t{p.scope_label}\t{state}\tlast run {last}\t{p.describe()}")
            return
        policy = TieringPolicy.objects.filter(pk=opts["policy"]).first()
        if policy is None:
            raise CommandError(f"no tiering policy {opts['policy']}")
        if opts["do"] == "preview":
            preview = policies.preview(policy)
            sel = preview.selection
            self.stdout.write(f"{policy}: {policy.describe()}")
            self.stdout.write(f"selected {len(sel.selected)} checkpoint(s), {bytes_iec(sel.bytes)}")
            for s in sel.selected[:50]:
                where = f" (copy at {s.copy.location.name})" if s.copy is not None else ""
                self.stdout.write(f"  {s.checkpoint}{where}")
            for checkpoint, why in sel.skipped[:50]:
                self.stdout.write(f"  left out {checkpoint}: {why}")
            return
        try:
            summary = policies.policy_run(
                policy_id=policy.pk, actor=Actor.command("manage.py tiering_policy"), reason=opts["reason"]
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"asked for {len(summary.asked)} job(s): {summary.asked[:20]}; left out {len(summary.skipped)}"
        )
