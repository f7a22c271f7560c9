"""Bulk actions from the triage lists (the copy queues, the placement flags): pin, hold or schedule deletion of
many checkpoints at once, with the same preview and the same refusals as one at a time.

The flow is select -> preview (GET) -> confirm (POST) -> result. The preview shows, per checkpoint, what the
single action's page shows (for a deletion ``services.preview``: copies, files, bytes, money per month and
the newest restorable checkpoint left), and lists what would be refused with the reason. Confirming calls the
same service function as the single action once per checkpoint: each is its own transaction with its own
audit event, and a refusal of one (a hold placed meanwhile, a pin) does not undo the others; it is reported.
The role check is the services' own; a person without the operator role is refused once, up front, and the
refusal is audited like any other.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.roles import Role, has_role, require_role
from access.scoping import restrict_runs
from actions import api_examples, promises, services
from actions.models import Hold, Pin
from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.templatetags.fleet_format import ckpt_label
from ckptfleet.api_fields import AsciiIntegerField
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.early_deletion import EarlyDeletion

MAX_ITEMS = 200
KEEP_RESULTS = 5

PIN, HOLD, DELETE = "pin", "hold", "delete"
# What the lists offer. A deletion names its scope: the copy a queue row lists, or the whole checkpoint.
CHOICES = {
    "pin": (PIN, False, "Pin"),
    "hold": (HOLD, False, "Place a legal hold on"),
    "delete-copy": (DELETE, True, "Schedule deletion of the listed copy of"),
    "delete-checkpoint": (DELETE, False, "Schedule deletion of every copy of"),
    # The API's: each item's own copy when it names one, else the whole checkpoint.
    "delete": (DELETE, None, "Schedule deletion of"),
}
DOING = {PIN: "pinning checkpoints", HOLD: "placing holds", DELETE: "scheduling deletions"}


@dataclass
class Item:
    """One selected checkpoint (and, for a copy's deletion, the copy) with its preview and, later, its outcome."""

    checkpoint_id: int
    copy_id: int | None = None
    checkpoint: Checkpoint | None = None
    copy: CheckpointCopy | None = None
    refusal: str | None = None
    refusal_code: str = ""
    promise: int | None = None
    files: int = 0
    bytes: int = 0
    copies: int = 0
    notes: list[str] = field(default_factory=list)
    preview: services.DeletionPreview | None = None

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    @property
    def label(self) -> str:
        if self.checkpoint is None:
            return f"checkpoint {self.checkpoint_id}"
        where = f" at {self.copy.location.name}" if self.copy is not None else ""
        return f"{self.checkpoint.run} {ckpt_label(self.checkpoint)}{where}"

    @property
    def promise_text(self) -> str:
        return promises.PROMISES.get(self.promise, "") if self.promise else ""

    def refuse(self, message: str, code: str, promise: int | None = None) -> None:
        self.refusal, self.refusal_code, self.promise = message, code, promise


@dataclass
class RunEffect:
    """What a bulk deletion leaves of one run: its newest restorable checkpoint before and after all of it."""

    run: Run
    items: int
    files: int
    bytes: int
    monthly_cost: Decimal | None
    newest_before: Checkpoint | None
    newest_after: Checkpoint | None
    newest_after_verified: bool

    @property
    def newest_changes(self) -> bool:
        return self.newest_before != self.newest_after


@dataclass
class Selection:
    """A parsed request: the action, whether a deletion takes the listed copies, and the items."""

    action: str
    choice: str
    items: list[Item]
    errors: list[str] = field(default_factory=list)

    @property
    def verb(self) -> str:
        return CHOICES[self.choice][2]


# --- reading the selection ------------------------------------------------------------------------------


_ID = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit also takes "¹", which int() refuses


def parse_items(values: list[str]) -> tuple[list[tuple[int, int | None]], list[str]]:
    """``"<checkpoint id>"`` or ``"<checkpoint id>:<copy id>"`` values, in order and without repeats."""
    out: list[tuple[int, int | None]] = []
    errors = []
    for raw in values:
        head, _, tail = (raw or "").strip().partition(":")
        # Ids are positive and fit a bigint; anything else is refused before it reaches a query.
        if not _ID.fullmatch(head) or (tail and not _ID.fullmatch(tail)):
            errors.append(f"{raw[:40]!r} is not a checkpoint (or checkpoint:copy) id")
            continue
        pair = (int(head), int(tail) if tail else None)
        if pair not in out:
            out.append(pair)
    return out, errors


def select(user, choice: str, pairs: list[tuple[int, int | None]]) -> Selection:
    """Load the checkpoints (those the person may see) and copies of a selection; five queries at most."""
    if choice not in CHOICES:
        return Selection(action="", choice="pin", items=[], errors=["choose what to do: pin, hold or delete"])
    action, with_copy, _ = CHOICES[choice]
    if with_copy is False:  # one action per checkpoint, whichever of its copies the rows listed
        seen: list[tuple[int, int | None]] = []
        for ck, _ in pairs:
            if (ck, None) not in seen:
                seen.append((ck, None))
        pairs = seen
    selection = Selection(action=action, choice=choice, items=[Item(ck, cp) for ck, cp in pairs])
    if not pairs:
        selection.errors.append("select at least one checkpoint")
        return selection
    if len(pairs) > MAX_ITEMS:
        selection.errors.append(f"select at most {MAX_ITEMS} at once ({len(pairs)} selected)")
        return selection
    checkpoints = restrict_runs(Checkpoint.objects.select_related("run__team"), user, run_path="run__").in_bulk(
        [ck for ck, _ in pairs]
    )
    copy_ids = [cp for _, cp in pairs if cp is not None]
    copies = CheckpointCopy.objects.select_related("location").in_bulk(copy_ids) if copy_ids else {}
    for item in selection.items:
        item.checkpoint = checkpoints.get(item.checkpoint_id)
        if item.checkpoint is None:
            item.refuse(f"checkpoint {item.checkpoint_id} does not exist", "not_found")
            continue
        if with_copy or (with_copy is None and item.copy_id is not None):
            item.copy = copies.get(item.copy_id) if item.copy_id else None
            if item.copy is None or item.copy.checkpoint_id != item.checkpoint.pk:
                item.refuse(
                    "no copy of this checkpoint was listed; choose the deletion of every copy instead"
                    if item.copy_id is None
                    else f"copy {item.copy_id} is not a copy of {item.checkpoint}",
                    "no_copy",
                )
    return selection


# --- the preview ----------------------------------------------------------------------------------------


def _sizes(items: list[Item]) -> None:
    """Copies, files and bytes present of each checkpoint: one query."""
    ids = [i.checkpoint.pk for i in items if i.checkpoint is not None]
    rows = (
        CheckpointCopy.objects.filter(checkpoint_id__in=ids, gone_at__isnull=True)
        .values("checkpoint_id")
        .annotate(n=Count("pk"), files=Sum("file_count"), bytes=Sum("bytes"))
        .order_by()
    )
    sizes = {r["checkpoint_id"]: (r["n"], r["files"] or 0, r["bytes"] or 0) for r in rows}
    for item in items:
        if item.checkpoint is not None:
            item.copies, item.files, item.bytes = sizes.get(item.checkpoint.pk, (0, 0, 0))


def _preview_pins(items: list[Item]) -> None:
    live = [i for i in items if i.allowed]
    _sizes(live)
    pins = {
        p.checkpoint_id: p
        for p in Pin.objects.filter(checkpoint_id__in=[i.checkpoint.pk for i in live], unpinned_at__isnull=True)
    }
    for item in live:
        current = pins.get(item.checkpoint.pk)
        if current is not None:  # the words of services.pin
            item.refuse(
                f"{item.checkpoint} is already pinned by {current.pinned_label} "
                f"since {current.pinned_at:%Y-%m-%d %H:%M} UTC",
                "already_pinned",
            )


def _preview_holds(items: list[Item], case_ref: str) -> None:
    live = [i for i in items if i.allowed]
    _sizes(live)
    runs = {i.checkpoint.run_id for i in live}
    holds = list(
        Hold.objects.filter(run_id__in=runs, released_at__isnull=True).only("run_id", "checkpoint_id", "case_ref")
    )
    case_ref = (case_ref or "").strip()
    for item in live:
        ck = item.checkpoint
        own = [h for h in holds if h.checkpoint_id == ck.pk]
        whole = [h for h in holds if h.run_id == ck.run_id and h.checkpoint_id is None]
        if case_ref and any(h.case_ref == case_ref for h in own):  # the check of services.hold
            item.refuse(f"case {case_ref} already holds {ck}", "already_held")
            continue
        if own or whole:
            cases = ", ".join(sorted({h.case_ref for h in own + whole}))
            item.notes.append(f"already held (case {cases}); this hold is added beside it")


def together_of(items: list[Item]) -> services.Together:
    """What the selected deletions take in all and per run, for the blast radius: a bulk call is one request
    (issue 26). Bytes and files of each checkpoint, or of the one copy listed; one query."""
    _sizes(items)
    together = services.Together()
    for item in items:
        if item.checkpoint is None or (not item.allowed and item.refusal_code in ("not_found", "no_copy")):
            continue
        if item.copy is not None:
            together.add(item.checkpoint.run_id, item.copy.bytes, item.copy.file_count)
        else:
            together.add(item.checkpoint.run_id, item.bytes, item.files)
    return together


def _preview_deletions(items: list[Item], actor: Actor | None = None) -> list[RunEffect]:
    """Each deletion's own preview (``services.preview``, as the single page shows it), and per run what all
    of them together leave restorable. The blast radius counts them all as one request."""
    together = together_of(items)
    for item in items:
        if not item.allowed:
            continue
        try:
            p = services.preview(checkpoint=item.checkpoint, copy=item.copy, actor=actor, together=together)
        except DomainError as exc:
            item.refuse(exc.message, exc.code)
            continue
        item.preview = p
        item.files, item.bytes, item.copies = p.files, p.bytes, len(p.parts)
        if not p.allowed:
            item.refuse(p.refusal, p.refusal_code, p.promise)
        elif p.needs_approval:
            item.notes.append("another person must approve it: " + "; ".join(p.approval_reasons))
        # Archived objects the trash cannot take (services.archived_left_in_place), said as the single preview does.
        item.notes.extend(line.rstrip(".") for line in p.archived_stay)
    effects = []
    by_run: dict[int, list[Item]] = {}
    for item in items:
        if item.allowed and item.preview is not None:
            by_run.setdefault(item.checkpoint.run_id, []).append(item)
    for run_items in by_run.values():
        going = {part.copy.pk for i in run_items for part in i.preview.parts}
        first = run_items[0].preview
        # The rule of the single preview, applied to every copy the bulk deletion takes from this run.
        after_id, after_verified = services.newest_excluding(first.checkpoint.run_id, going)
        after = Checkpoint.objects.filter(pk=after_id).first() if after_id is not None else None
        costs = [i.preview.monthly_cost for i in run_items]
        effects.append(
            RunEffect(
                run=first.checkpoint.run,
                items=len(run_items),
                files=sum(i.preview.files for i in run_items),
                bytes=sum(i.preview.freed_bytes for i in run_items),
                monthly_cost=sum(costs, Decimal(0)) if all(c is not None for c in costs) else None,
                newest_before=first.newest_before,
                newest_after=after,
                newest_after_verified=after_verified,
            )
        )
    return effects


@dataclass
class Preview:
    selection: Selection
    effects: list[RunEffect]
    currency: str = ""
    grace_days: int | None = None  # deletions: the grace period (``services.grace_days``)
    at: datetime = field(default_factory=timezone.now)

    @property
    def execute_after(self) -> datetime | None:
        """Deletions: the soonest they would run if confirmed now (each its own grace period from then)."""
        return None if self.grace_days is None else self.at + services.grace_period()

    @property
    def allowed(self) -> list[Item]:
        return [i for i in self.selection.items if i.allowed]

    @property
    def refused(self) -> list[Item]:
        return [i for i in self.selection.items if not i.allowed]

    @property
    def files(self) -> int:
        return sum(i.files for i in self.allowed)

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.allowed)

    @property
    def freed_bytes(self) -> int:
        """Deletions: what they free, less the archived objects they leave in place (``services.archived_stay``)."""
        return sum(i.preview.freed_bytes if i.preview is not None else i.bytes for i in self.allowed)

    @property
    def staying_bytes(self) -> int:
        return self.bytes - self.freed_bytes

    @property
    def early_deletion(self) -> EarlyDeletion:
        """Deletions: the early-deletion charge of everything that would go (``fleet.early_deletion``)."""
        total = EarlyDeletion()
        for i in self.allowed:
            if i.preview is not None:
                total += i.preview.early_deletion
        return total

    @property
    def monthly_cost(self) -> Decimal | None:
        costs = [i.preview.monthly_cost for i in self.allowed if i.preview is not None]
        if not costs or any(c is None for c in costs):
            return None
        return sum(costs, Decimal(0))


def preview(selection: Selection, *, case_ref: str = "") -> Preview:
    """What the action would do to each item of a valid selection, and what it would refuse, changing nothing."""
    effects: list[RunEffect] = []
    if not selection.errors:
        if selection.action == PIN:
            _preview_pins(selection.items)
        elif selection.action == HOLD:
            _preview_holds(selection.items, case_ref)
        else:
            effects = _preview_deletions(selection.items)
    currency = next((i.preview.currency for i in selection.items if i.preview is not None), "")
    grace = services.grace_days() if selection.action == DELETE else None
    return Preview(selection, effects, currency, grace_days=grace)


# --- acting ---------------------------------------------------------------------------------------------


def check_input(action: str, reason: str, case_ref: str) -> list[str]:
    """What is missing before anything may be done; the services say the same, once per item."""
    errors = []
    if not (reason or "").strip():
        errors.append("a reason is required")
    elif len(reason.strip()) > services.MAX_REASON:
        errors.append(f"the reason is longer than {services.MAX_REASON} characters")
    if action == HOLD:
        if not (case_ref or "").strip():
            errors.append("a case reference is required for a hold")
        elif len(case_ref.strip()) > services.MAX_CASE_REF:
            errors.append(f"the case reference is longer than {services.MAX_CASE_REF} characters")
    return errors


def require_operator(actor: Actor, action: str) -> None:
    """The services' role check, once for the whole request: one audited refusal, nothing attempted."""
    require_role(actor.user, Role.OPERATOR, doing=f"{DOING[action]} in bulk", source=actor.source)


def act(selection: Selection, *, reason: str, case_ref: str, actor: Actor, request_id: str) -> list[dict]:
    """Each item through the single action's service: one transaction and one audit event each; a refusal of
    one is reported and the others go on."""
    results = []
    together = together_of(selection.items) if selection.action not in (PIN, HOLD) else None
    for item in selection.items:
        entry = {
            "checkpoint": item.checkpoint_id,
            "copy": item.copy.pk if item.copy is not None else None,
            "label": item.label,
            "run": item.checkpoint.run_id if item.checkpoint is not None else None,
            "done": False,
            "message": "",
            "object": None,
            "url": reverse("catalog:checkpoint-detail", args=[item.checkpoint_id]) if item.checkpoint else "",
        }
        results.append(entry)
        if item.checkpoint is None or (not item.allowed and item.refusal_code in ("not_found", "no_copy")):
            entry["message"] = item.refusal or "not found"
            entry["code"] = item.refusal_code or "not_found"
            entry["url"] = ""
            continue
        try:
            if selection.action == PIN:
                made = services.pin(checkpoint=item.checkpoint, reason=reason, actor=actor, request_id=request_id)
                entry["message"] = "pinned"
            elif selection.action == HOLD:
                made = services.hold(
                    run=item.checkpoint.run,
                    checkpoint=item.checkpoint,
                    reason=reason,
                    case_ref=case_ref,
                    actor=actor,
                    request_id=request_id,
                )
                entry["message"] = f"hold {made.case_ref} placed"
            else:
                made = services.schedule_deletion(
                    checkpoint=item.checkpoint,
                    copy=item.copy,
                    reason=reason,
                    actor=actor,
                    request_id=request_id,
                    together=together,
                )
                wait = " (needs another person's approval)" if made.needs_approval else ""
                entry["message"] = f"deletion {made.pk} scheduled{wait}"
                entry["outcome_url"] = reverse("actions:deletion-detail", args=[made.pk])
        except PermissionRefused:
            raise
        except DomainError as exc:
            entry["message"], entry["code"] = exc.message, exc.code
        else:
            entry["done"], entry["object"], entry["code"] = True, made.pk, "done"
    return results


# --- the pages ------------------------------------------------------------------------------------------


def _next_url(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False):
        return target
    return reverse("overview:copy-queue")


def _render_preview(request, selection: Selection, *, reason: str, case_ref: str, errors=(), status: int = 200):
    result = preview(selection, case_ref=case_ref)
    return render(
        request,
        "actions/bulk_preview.html",
        {
            "selection": selection,
            "preview": result,
            "choice": selection.choice,
            "reason": reason,
            "case_ref": case_ref,
            "errors": [*selection.errors, *errors],
            "can_act": has_role(request.user, Role.OPERATOR),
            "next": _next_url(request),
            "grace_days": result.grace_days,
            "grace_text": services.grace_text(),
        },
        status=status,
    )


@login_required
def bulk(request):
    """GET: the preview of the selected items. POST: act on them, then show what was done and refused."""
    data = request.POST if request.method == "POST" else request.GET
    pairs, errors = parse_items(data.getlist("item"))
    choice = data.get("action", "")
    reason, case_ref = data.get("reason", ""), data.get("case_ref", "")
    selection = select(request.user, choice, pairs)
    selection.errors[:0] = errors
    if request.method != "POST" or selection.errors:
        return _render_preview(
            request, selection, reason=reason, case_ref=case_ref, status=400 if selection.errors else 200
        )
    actor = Actor.for_request(request)
    try:
        require_operator(actor, selection.action)
    except DomainError as exc:
        return _render_preview(request, selection, reason=reason, case_ref=case_ref, errors=[exc.message], status=403)
    problems = check_input(selection.action, reason, case_ref)
    if problems:  # bad input changes nothing
        return _render_preview(request, selection, reason=reason, case_ref=case_ref, errors=problems, status=400)
    request_id = getattr(request, "request_id", "") or request_id_of(request)
    try:
        results = act(selection, reason=reason.strip(), case_ref=case_ref.strip(), actor=actor, request_id=request_id)
    except PermissionRefused as exc:  # a role taken away mid-way: what was done stays done
        return _render_preview(request, selection, reason=reason, case_ref=case_ref, errors=[exc.message], status=403)
    token = uuid.uuid4().hex
    kept = dict(list(request.session.get("bulk_results", {}).items())[-(KEEP_RESULTS - 1) :])
    kept[token] = {
        "verb": selection.verb,
        "reason": reason.strip(),
        "case_ref": case_ref.strip() if selection.action == HOLD else "",
        "results": results,
        "next": _next_url(request),
        "request_id": request_id[:64],
    }
    request.session["bulk_results"] = kept
    return redirect("actions:bulk-result", token=token)


@login_required
def bulk_result(request, token: str):
    """What a confirmed bulk action did and refused (kept in the person's session, the last few)."""
    found = request.session.get("bulk_results", {}).get(token)
    if found is None:
        return render(request, "actions/bulk_result.html", {"missing": True}, status=404)
    results = found["results"]
    return render(
        request,
        "actions/bulk_result.html",
        {
            "verb": found["verb"],
            "reason": found["reason"],
            "case_ref": found["case_ref"],
            "done": [r for r in results if r["done"]],
            "refused": [r for r in results if not r["done"]],
            "next": found["next"],
            "request_id": found.get("request_id", ""),
        },
    )


def items_of(rows: list[dict]) -> list[tuple[int, int | None]]:
    """The API's ``[{"checkpoint": id, "copy": id?}]`` as pairs (``parse_items``' output)."""
    out: list[tuple[int, int | None]] = []
    for row in rows:
        pair = (row["checkpoint"], row.get("copy"))
        if pair not in out:
            out.append(pair)
    return out


# --- the API --------------------------------------------------------------------------------------------


class BulkItemInput(serializers.Serializer):
    checkpoint = AsciiIntegerField(min_value=1)
    copy = AsciiIntegerField(
        min_value=1, required=False, allow_null=True, default=None, help_text="Delete this copy only."
    )


class BulkInput(serializers.Serializer):
    action = serializers.ChoiceField(choices=[PIN, HOLD, DELETE])
    items = BulkItemInput(many=True, allow_empty=False, max_length=MAX_ITEMS)
    reason = serializers.CharField(allow_blank=True, required=False, default="", trim_whitespace=False)
    case_ref = serializers.CharField(allow_blank=True, required=False, default="", help_text="Required for a hold.")
    confirm = serializers.BooleanField(
        default=False, help_text="false: only the preview, nothing changes. true: act on every item."
    )


class BulkPreviewItem(serializers.Serializer):
    checkpoint = AsciiIntegerField()
    copy = AsciiIntegerField(allow_null=True)
    label = serializers.CharField()
    allowed = serializers.BooleanField()
    refusal = serializers.CharField(allow_null=True)
    refusal_code = serializers.CharField(allow_null=True)
    promise = AsciiIntegerField(allow_null=True)
    copies = AsciiIntegerField()
    files = AsciiIntegerField()
    bytes = AsciiIntegerField()
    monthly_cost = serializers.CharField(allow_null=True, help_text="Deletions: money saved per month.")
    needs_approval = serializers.BooleanField()
    approval_reasons = serializers.ListField(child=serializers.CharField())
    kept_by = serializers.ListField(
        child=serializers.DictField(), help_text="Deletions: the locked retention policies that keep the checkpoint."
    )
    notes = serializers.ListField(child=serializers.CharField())
    newest_restorable_after = AsciiIntegerField(allow_null=True)
    sample = serializers.ListField(child=serializers.DictField(), help_text="Deletions: the first items.")


class BulkRunEffect(serializers.Serializer):
    run = AsciiIntegerField()
    deletions = AsciiIntegerField()
    files = AsciiIntegerField()
    bytes = AsciiIntegerField()
    monthly_cost = serializers.CharField(allow_null=True)
    newest_restorable_before = AsciiIntegerField(allow_null=True)
    newest_restorable_after = AsciiIntegerField(allow_null=True)
    newest_restorable_after_verified = serializers.BooleanField()


class BulkOutcome(serializers.Serializer):
    checkpoint = AsciiIntegerField()
    copy = AsciiIntegerField(allow_null=True)
    label = serializers.CharField()
    done = serializers.BooleanField()
    code = serializers.CharField(help_text='"done", or the refusal\'s code')
    message = serializers.CharField()
    object = AsciiIntegerField(allow_null=True, help_text="The pin, hold or deletion made.")


class BulkOutput(serializers.Serializer):
    action = serializers.CharField()
    confirmed = serializers.BooleanField()
    items = BulkPreviewItem(many=True, required=False, help_text="The preview (confirm=false).")
    runs = BulkRunEffect(many=True, required=False, help_text="Deletions: what each run keeps restorable.")
    files = AsciiIntegerField(required=False)
    bytes = AsciiIntegerField(required=False)
    monthly_cost = serializers.CharField(allow_null=True, required=False)
    early_deletion = serializers.DictField(
        required=False,
        help_text="Deletions: {charge, objects, bytes, unpriced_objects}: what removing objects younger than their "
        "storage class's minimum duration is billed.",
    )
    currency = serializers.CharField(required=False)
    grace_days = AsciiIntegerField(required=False, help_text="Deletions: days before they may run.")
    execute_after = serializers.DateTimeField(
        required=False, help_text="Deletions: the soonest they would run if confirmed now (UTC)."
    )
    done = BulkOutcome(many=True, required=False, help_text="What was done (confirm=true).")
    refused = BulkOutcome(many=True, required=False, help_text="What was refused, with why (confirm=true).")


def _money(value: Decimal | None) -> str | None:
    return str(value) if value is not None else None


def _early_data(early: EarlyDeletion) -> dict:
    return {
        "charge": str(early.rounded),
        "objects": early.objects,
        "bytes": early.bytes,
        "unpriced_objects": early.unpriced_objects,
    }


def preview_data(result: Preview) -> dict:
    items = []
    for i in result.selection.items:
        p = i.preview
        items.append(
            {
                "checkpoint": i.checkpoint_id,
                "copy": i.copy_id,
                "label": i.label,
                "allowed": i.allowed,
                "refusal": i.refusal,
                "refusal_code": i.refusal_code or None,
                "promise": i.promise,
                "copies": i.copies,
                "files": i.files,
                "bytes": i.bytes,
                "monthly_cost": _money(p.monthly_cost) if p is not None else None,
                "needs_approval": bool(p and p.needs_approval),
                "approval_reasons": list(p.approval_reasons) if p is not None else [],
                "kept_by": [k.as_dict() for k in p.kept_by] if p is not None else [],
                "notes": i.notes,
                "newest_restorable_after": p.newest_after.pk if p is not None and p.newest_after else None,
                "sample": p.sample if p is not None else [],
            }
        )
    return {
        "action": result.selection.action,
        "confirmed": False,
        "items": items,
        "runs": [
            {
                "run": e.run.pk,
                "deletions": e.items,
                "files": e.files,
                "bytes": e.bytes,
                "monthly_cost": _money(e.monthly_cost),
                "newest_restorable_before": e.newest_before.pk if e.newest_before else None,
                "newest_restorable_after": e.newest_after.pk if e.newest_after else None,
                "newest_restorable_after_verified": e.newest_after_verified,
            }
            for e in result.effects
        ],
        "files": result.files,
        "bytes": result.bytes,
        "monthly_cost": _money(result.monthly_cost),
        **({"early_deletion": _early_data(result.early_deletion)} if result.selection.action == DELETE else {}),
        "currency": result.currency,
        **(
            {"grace_days": result.grace_days, "execute_after": result.execute_after.isoformat()}
            if result.grace_days is not None
            else {}
        ),
    }


class BulkApiView(APIView):
    """``POST /api/v1/actions/bulk/``: pin, hold or schedule deletion of many checkpoints.

    ``confirm=false`` (the default) answers the preview and changes nothing; ``confirm=true`` acts on every
    item through the single action's service (one transaction and one audit event each) and answers what
    was done and what was refused. Acting needs the operator role; a refusal of the role is audited.
    """

    @extend_schema(
        request=BulkInput,
        responses={200: BulkOutput},
        summary="Bulk pin, hold or deletion",
        examples=api_examples.BULK,
    )
    def post(self, request):
        data = BulkInput(data=request.data)
        data.is_valid(raise_exception=True)
        data = data.validated_data
        pairs = [(row["checkpoint"], row["copy"]) for row in data["items"]]
        pairs = list(dict.fromkeys(pairs))
        selection = select(request.user, data["action"], pairs)
        if selection.errors:
            raise DomainError("; ".join(selection.errors))
        if not data["confirm"]:
            return Response(preview_data(preview(selection, case_ref=data["case_ref"])))
        actor = Actor.for_request(request)
        require_operator(actor, selection.action)
        problems = check_input(selection.action, data["reason"], data["case_ref"])
        if problems:
            raise DomainError("; ".join(problems), code="required")
        results = act(
            selection,
            reason=data["reason"].strip(),
            case_ref=data["case_ref"].strip(),
            actor=actor,
            request_id=getattr(request, "request_id", "") or request_id_of(request),
        )
        keep = ("checkpoint", "copy", "label", "done", "code", "message", "object")
        rows = [{k: r.get(k) for k in keep} for r in results]
        return Response(
            {
                "action": selection.action,
                "confirmed": True,
                "done": [r for r in rows if r["done"]],
                "refused": [r for r in rows if not r["done"]],
            }
        )
