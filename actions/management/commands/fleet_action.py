"""Operator actions from the shell, through the same services as the pages and the API.

    manage.py fleet_action pin      --as olga --checkpoint 12 --reason "baseline"
    manage.py fleet_action unpin    --as olga --checkpoint 12 [--reason ...]
    manage.py fleet_action hold     --as olga --run 3 [--checkpoint 12] --reason "..." --case LEG-1
    manage.py fleet_action release  --as oscar --hold 5 --reason "case closed" [--case LEG-1-CLOSE]
    manage.py fleet_action hold     --as olga --run 3 --mode compliance --retain-until 2027-06-30 --reason .. --case ..
    manage.py fleet_action extend   --as olga --hold 5 --retain-until 2028-06-30 --reason "appeal filed"
    manage.py fleet_action preview  --checkpoint 12 [--copy 40]
    manage.py fleet_action schedule --as olga --checkpoint 12 [--copy 40] --reason "superseded"
    manage.py fleet_action approve  --as april --deletion 7
    manage.py fleet_action cancel   --as olga --deletion 7 --reason "wrong step"

``--as`` names the person acting: the command checks their roles and the promises exactly as the
pages do (an admin gets no bypass), and the audit trail records them with source "command".
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.refusals import refusals_collected
from actions import services
from actions.models import DeletionJob, Hold
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import Checkpoint, CheckpointCopy, Run
from ckptfleet.errors import DomainError
from ckptfleet.units import bytes_iec

ACTIONS = ("pin", "unpin", "hold", "release", "extend", "preview", "schedule", "approve", "cancel")


class Command(BaseCommand):
    help = (
        "Pin, unpin, hold, release, extend (a compliance hold), preview, schedule, approve or cancel, as a named "
        "person, with an audit event."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("--as", dest="username", help="The person acting (required except for preview).")
        parser.add_argument("--checkpoint", type=int)
        parser.add_argument("--copy", type=int)
        parser.add_argument("--run", type=int)
        parser.add_argument("--hold", type=int)
        parser.add_argument("--deletion", type=int)
        parser.add_argument("--reason", default="")
        parser.add_argument("--case", dest="case_ref", default="")
        parser.add_argument(
            "--mode", default="legal", help="hold: legal (default), governance or compliance (needs --retain-until)"
        )
        parser.add_argument("--retain-until", default=None, help="hold, extend: YYYY-MM-DD or an ISO 8601 time")

    def _get(self, model, pk, what: str):
        if pk is None:
            raise CommandError(f"--{what} is required for this action")
        try:
            return model.objects.get(pk=pk)
        except model.DoesNotExist:
            raise CommandError(f"{what} {pk} does not exist") from None

    def handle(self, *args, **opts):
        action = opts["action"]
        with refusals_collected(source=EventSource.COMMAND):
            try:
                self._handle(action, opts)
            except DomainError as exc:
                raise CommandError(exc.message) from None

    def _actor(self, opts):
        username = opts["username"]
        if not username:
            raise CommandError("--as USERNAME is required: actions are recorded as the person who takes them")
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user named {username!r}")
        return Actor.person(user, EventSource.COMMAND)

    def _handle(self, action: str, opts) -> None:
        out = self.stdout
        if action == "preview":
            checkpoint = self._get(Checkpoint, opts["checkpoint"], "checkpoint")
            copy = self._get(CheckpointCopy, opts["copy"], "copy") if opts["copy"] else None
            p = services.preview(checkpoint=checkpoint, copy=copy)
            out.write(f"{checkpoint}: {p.files} item(s), {bytes_iec(p.bytes)} in {len(p.parts)} copy(ies)")
            money = f"{p.monthly_cost} {p.currency}" if p.monthly_cost is not None else "unknown"
            out.write(f"saves per month: {money}")
            after = str(p.newest_after) if p.newest_after else "none"
            out.write(f"newest restorable afterwards: {after}")
            if p.refusal:
                out.write(f"refused (promise {p.promise or '-'}): {p.refusal}")
            elif p.needs_approval:
                out.write("needs approval: " + "; ".join(p.approval_reasons))
            return
        actor = self._actor(opts)
        if action == "pin":
            made = services.pin(
                checkpoint=self._get(Checkpoint, opts["checkpoint"], "checkpoint"), reason=opts["reason"], actor=actor
            )
            out.write(f"pinned {made.checkpoint} (pin {made.pk})")
        elif action == "unpin":
            done = services.unpin(
                checkpoint=self._get(Checkpoint, opts["checkpoint"], "checkpoint"), reason=opts["reason"], actor=actor
            )
            out.write(f"unpinned {done.checkpoint}")
        elif action == "hold":
            run = self._get(Run, opts["run"], "run")
            checkpoint = self._get(Checkpoint, opts["checkpoint"], "checkpoint") if opts["checkpoint"] else None
            made = services.hold(
                run=run,
                checkpoint=checkpoint,
                reason=opts["reason"],
                case_ref=opts["case_ref"],
                mode=opts["mode"],
                retain_until=opts["retain_until"],
                actor=actor,
            )
            until = f", retained until {made.retain_until:%Y-%m-%d %H:%M} UTC" if made.retain_until else ""
            out.write(f"{made.mode} hold {made.pk} ({made.case_ref}) placed on {checkpoint or run}{until}")
        elif action == "release":
            done = services.release(
                hold=self._get(Hold, opts["hold"], "hold"),
                reason=opts["reason"],
                case_ref=opts["case_ref"],
                actor=actor,
            )
            out.write(f"hold {done.pk} ({done.case_ref}) released")
        elif action == "extend":
            done = services.extend_hold(
                hold=self._get(Hold, opts["hold"], "hold"),
                retain_until=opts["retain_until"] or "",
                reason=opts["reason"],
                actor=actor,
            )
            out.write(f"hold {done.pk} ({done.case_ref}) retained until {done.retain_until:%Y-%m-%d %H:%M} UTC")
        elif action == "schedule":
            checkpoint = self._get(Checkpoint, opts["checkpoint"], "checkpoint")
            copy = self._get(CheckpointCopy, opts["copy"], "copy") if opts["copy"] else None
            job = services.schedule_deletion(checkpoint=checkpoint, copy=copy, reason=opts["reason"], actor=actor)
            out.write(
                f"deletion {job.pk} {job.state}: {job.items_total} item(s), {bytes_iec(job.bytes_total)}, "
                f"no sooner than {job.execute_after:%Y-%m-%d %H:%M} UTC"
            )
        elif action == "approve":
            job = services.approve(job=self._get(DeletionJob, opts["deletion"], "deletion"), actor=actor)
            out.write(f"deletion {job.pk} approved")
        elif action == "cancel":
            job = services.cancel(
                job=self._get(DeletionJob, opts["deletion"], "deletion"), reason=opts["reason"], actor=actor
            )
            out.write(f"deletion {job.pk} cancelled")
