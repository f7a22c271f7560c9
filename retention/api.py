"""API of retention: the simulator, the tiering what-if, and policies with their dry runs.

The numbers are the pages' own (``retention.selectors``, ``retention.tiering``); money is an exact
decimal string in the price book's currency, bytes are integers.
"""

from __future__ import annotations

from decimal import Decimal

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.permissions import role_required
from access.roles import Role
from access.scoping import restrict, restrict_policies, restrict_teams, visible_team_names
from approvals.api import ChangeRequestSerializer
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from audit.actor import Actor
from catalog.models import Run, Team
from ckptfleet.api_fields import AsciiIntegerField, FleetModelSerializer
from ckptfleet.errors import DomainError
from fleet.choices import Tier
from retention import api_examples, services
from retention.models import RetentionPolicy
from retention.rules import KeepRules
from retention.selectors import Money, Scope, Simulation, simulate
from retention.tiering import TARGET_CLASSES, Move, Sums, tiering_whatif

SCOPE_PARAMETERS = [
    OpenApiParameter("team", int, description="Only this team's runs (its id)."),
    OpenApiParameter("run", int, description="Only this run (its id)."),
]
RULE_PARAMETERS = [
    OpenApiParameter("keep_last", int, description="Keep the N newest stepped checkpoints; 0: off (default 5)."),
    OpenApiParameter("keep_every", int, description="Keep steps that are a multiple of M; 0: off (default 0)."),
    OpenApiParameter("keep_milestones", bool, description="Default true."),
    OpenApiParameter("keep_critical", bool, description="Default true."),
    OpenApiParameter("keep_stepless", bool, description="Keep step-less exports; default true."),
    OpenApiParameter("detail", bool, description="Each checkpoint's decision (default true)."),
]


def _money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01')):f}"


def _exact(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.000001')):f}"


class _Params(serializers.Serializer):
    team = AsciiIntegerField(required=False, min_value=1)
    run = AsciiIntegerField(required=False, min_value=1)


class RulesParams(_Params):
    keep_last = AsciiIntegerField(required=False, default=5, min_value=0)
    keep_every = AsciiIntegerField(required=False, default=0, min_value=0)
    keep_milestones = serializers.BooleanField(required=False, default=True)
    keep_critical = serializers.BooleanField(required=False, default=True)
    keep_stepless = serializers.BooleanField(required=False, default=True)
    detail = serializers.BooleanField(required=False, default=True)


def _scope(data: dict, user) -> Scope:
    names = visible_team_names(user)  # a scoped person simulates over their teams' runs (access.scoping)
    if data.get("run"):
        get_object_or_404(restrict(Run.objects.all(), user), pk=data["run"])
        return Scope(run_id=data["run"], team_names=names)
    if data.get("team"):
        get_object_or_404(restrict_teams(Team.objects.all(), user), pk=data["team"])  # another team's: not found
        return Scope(team_id=data["team"], team_names=names)
    return Scope(team_names=names)


def _money_data(m: Money) -> dict:
    return {
        "checkpoints": m.checkpoints,
        "bytes": m.bytes,
        "monthly": _money(m.monthly),
        "unpriced_bytes": m.unpriced,
        # Only removing bytes is charged: the freed totals carry it, kept ones show 0.
        "early_deletion": {
            "charge": _money(m.early_deletion.charge),
            "objects": m.early_deletion.objects,
            "bytes": m.early_deletion.bytes,
            "unpriced_objects": m.early_deletion.unpriced_objects,
        },
    }


def simulation_data(sim: Simulation, *, detail: bool = True) -> dict:
    runs = []
    for r in sim.runs:
        row = {
            "run": r.run.pk,
            "run_label": f"{r.run.team.name}/{r.run.name}",
            "status": r.run.status,
            "kept": _money_data(r.kept),
            "freed": _money_data(r.freed),
            "already_scheduled": _money_data(r.scheduled),
            "newest_restorable": (
                {
                    "checkpoint": r.newest_restorable.checkpoint.id,
                    "label": r.newest_restorable.checkpoint.label,
                    "verified": r.newest_verified,
                }
                if r.newest_restorable
                else None
            ),
        }
        if detail:
            row["checkpoints"] = [
                {
                    "checkpoint": d.checkpoint.id,
                    "label": d.checkpoint.label,
                    "step": d.checkpoint.step,
                    "importance": d.checkpoint.importance,
                    "kept": d.kept,
                    "reasons": [str(x) for x in d.reasons],
                    "why_dropped": d.why_dropped,
                    "kept_by": list(d.kept_by),
                    "already_scheduled": d.checkpoint.scheduled,
                    "bytes": d.checkpoint.bytes,
                }
                for d in r.plan.in_offer_order  # dropped first, transient ones leading (retention.rules)
            ]
        runs.append(row)
    return {
        "rules": {**sim.rules.__dict__, "described": sim.rules.describe()},
        "scope": {"team": sim.scope.team_id, "run": sim.scope.run_id},
        "priced_on": sim.day,
        "currency": sim.currency,
        "kept": _money_data(sim.kept),
        "freed": _money_data(sim.freed),
        "already_scheduled": _money_data(sim.scheduled),
        "runs": runs,
    }


class SimulateView(APIView):
    """What keep rules would keep and drop per run, the bytes and money per month freed, and the newest
    restorable checkpoint left. Changes nothing."""

    @extend_schema(operation_id="retention_simulate", parameters=[*SCOPE_PARAMETERS, *RULE_PARAMETERS], responses=dict)
    def get(self, request):
        params = RulesParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        d = params.validated_data
        rules = KeepRules(
            keep_last=d["keep_last"],
            keep_every=d["keep_every"],
            keep_milestones=d["keep_milestones"],
            keep_critical=d["keep_critical"],
            keep_stepless=d["keep_stepless"],
        )
        return Response(simulation_data(simulate(rules=rules, scope=_scope(d, request.user)), detail=d["detail"]))


class MoveParams(_Params):
    to_class = serializers.ChoiceField(choices=TARGET_CLASSES, default="GLACIER_IR")
    from_tier = serializers.ChoiceField(choices=Tier.values, default=Tier.NVME)
    from_class = serializers.CharField(required=False, default="", allow_blank=True, max_length=32)
    finished_only = serializers.BooleanField(required=False, default=True)
    to_location = AsciiIntegerField(required=False, min_value=1)


def _sums(s: Sums) -> dict:
    return {
        "checkpoints": s.checkpoints,
        "bytes": s.bytes,
        "files": s.files,
        "monthly_now": _exact(s.current),
        "monthly_after": _exact(s.after),
        "monthly_saving": _exact(s.saving),
        "early_deletion": _exact(s.early_deletion),
        "requests": _exact(s.requests),
        "one_off": _exact(s.one_off),
        "break_even_months": None if s.break_even_months is None else f"{s.break_even_months:f}",
        "minimum_commitment": _exact(s.commitment),
        "unpriced_bytes": s.unpriced,
        "held_checkpoints_left": s.held_checkpoints,
        "held_bytes_left": s.held_bytes,
        "disputed_checkpoints_left": s.disputed_checkpoints,
        "disputed_bytes_left": s.disputed_bytes,
    }


class TieringView(APIView):
    """Moving checkpoints off a tier to a storage class: monthly saving, one-off charges, break-even."""

    @extend_schema(
        operation_id="retention_tiering",
        parameters=[
            *SCOPE_PARAMETERS,
            OpenApiParameter("to_class", str, enum=list(TARGET_CLASSES)),
            OpenApiParameter("from_tier", str, enum=Tier.values, description="Default nvme."),
            OpenApiParameter("from_class", str, description="Only bytes in this storage class."),
            OpenApiParameter(
                "finished_only", bool, description="Only runs that ended: finished, failed, abandoned (default true)."
            ),
            OpenApiParameter("to_location", int, description="A bucket location whose prices apply."),
        ],
        responses=dict,
    )
    def get(self, request):
        params = MoveParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        d = params.validated_data
        move = Move(
            to_class=d["to_class"],
            from_tier=d["from_tier"],
            from_class=d["from_class"],
            finished_only=d["finished_only"],
            to_location_id=d.get("to_location"),
            scope=_scope(d, request.user),
        )
        w = tiering_whatif(move=move)
        return Response(
            {
                "move": {
                    "from_tier": move.from_tier,
                    "from_class": move.from_class,
                    "to_class": move.to_class,
                    "to_tier": w.to_tier,
                    "finished_only": move.finished_only,
                    "to_location": move.to_location_id,
                },
                "priced_on": w.day,
                "currency": w.currency,
                "to_min_storage_days": w.to_min_days,
                "request_price_per_1000": f"{w.request_price:f}",
                "total": _sums(w.total),
                "runs": [
                    {"run": r.run.pk, "run_label": f"{r.run.team.name}/{r.run.name}", **_sums(r.sums)} for r in w.runs
                ],
                "assumptions": w.assumptions,
            }
        )


class PolicySerializer(FleetModelSerializer):
    reason = serializers.CharField(write_only=True, required=False, allow_blank=True, default="")
    lock_state = serializers.CharField(
        read_only=True, help_text="unlocked; cooling_off (locked, can still be unlocked); binding (only stricter)"
    )
    pending_changes = serializers.SerializerMethodField(
        help_text="Ids of change requests awaiting a second person (/api/v1/approvals/changes/<id>/)."
    )

    class Meta:
        model = RetentionPolicy
        fields = [
            "id",
            "name",
            "team",
            "run",
            "keep_last",
            "keep_every",
            "keep_milestones",
            "keep_critical",
            "keep_stepless",
            "enabled",
            "created_label",
            "created_at",
            "updated_at",
            "last_proposed_at",
            "last_proposed_count",
            "locked_at",
            "locked_label",
            "lock_cooling_off_ends_at",
            "lock_state",
            "pending_changes",
            "reason",
        ]
        read_only_fields = [
            "created_label",
            "created_at",
            "updated_at",
            "last_proposed_at",
            "last_proposed_count",
            "locked_at",
            "locked_label",
            "lock_cooling_off_ends_at",
        ]
        extra_kwargs = {"team": {"validators": []}, "run": {"validators": []}}
        validators = []  # uniqueness and the one-scope rule are the service's, with its own messages

    def get_pending_changes(self, obj: RetentionPolicy) -> list[int]:
        return list(
            ChangeRequest.objects.filter(
                target_type="retention_policy", target_id=obj.pk, state=ChangeState.AWAITING_APPROVAL
            ).values_list("pk", flat=True)
        )


class PolicyListView(APIView):
    """Retention policies; POST creates one (operator role), audited."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [role_required(Role.OPERATOR, doing="creating a retention policy")()]
        return super().get_permissions()

    @extend_schema(
        operation_id="retention_policy_list", responses=PolicySerializer(many=True), examples=api_examples.POLICY
    )
    def get(self, request):
        """List retention policies."""
        policies = restrict_policies(RetentionPolicy.objects.all(), request.user).order_by("name", "pk")
        return Response(PolicySerializer(policies, many=True).data)

    @extend_schema(
        operation_id="retention_policy_create",
        request=PolicySerializer,
        responses=PolicySerializer,
        examples=api_examples.POLICY_CREATE,
    )
    def post(self, request):
        """Create a retention policy (operator role); it starts disabled."""
        ser = PolicySerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        names = visible_team_names(request.user)  # another team's run or team is not found (access.scoping)
        if names is not None and (
            (d.get("run") and d["run"].team.name not in names) or (d.get("team") and d["team"].name not in names)
        ):
            raise Http404("no such run or team")
        policy = services.policy_create(
            actor=Actor.for_request(request),
            request_id=getattr(request, "request_id", None) or request_id_of(request),
            **d,
        )
        return Response(PolicySerializer(policy).data, status=status.HTTP_201_CREATED)


class PolicyDetailView(APIView):
    """One policy; PATCH changes its name, rules or enabled (operator role), audited.

    A change that can delete more (enabling, or keeping less while enabled) is not applied: it answers
    202 with the change request that waits for a second person (``retention.services.deletes_more``).
    A locked policy past its cooling-off refuses a loosening with 409."""

    def get_permissions(self):
        if self.request.method == "PATCH":
            return [role_required(Role.OPERATOR, doing="editing a retention policy")()]
        return super().get_permissions()

    @extend_schema(
        operation_id="retention_policy_read",
        responses=PolicySerializer,
        examples=api_examples.POLICY,
    )
    def get(self, request, pk: int):
        """One retention policy."""
        policy = get_object_or_404(restrict_policies(RetentionPolicy.objects.all(), request.user), pk=pk)
        return Response(PolicySerializer(policy).data)

    @extend_schema(
        operation_id="retention_policy_update",
        request=PolicySerializer,
        responses=PolicySerializer,
        examples=api_examples.POLICY_UPDATE,
    )
    def patch(self, request, pk: int):
        """Change a retention policy; a change that keeps less waits for approval."""
        get_object_or_404(restrict_policies(RetentionPolicy.objects.all(), request.user), pk=pk)
        ser = PolicySerializer(data=request.data, partial=True)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        if {"team", "run"} & set(d):
            raise DomainError("a policy's team or run cannot change; create a policy for the other one")
        reason = d.pop("reason", "")
        edit = services.policy_update(
            policy_id=pk,
            actor=Actor.for_request(request),
            reason=reason,
            request_id=getattr(request, "request_id", None) or request_id_of(request),
            **d,
        )
        data = PolicySerializer(edit.policy).data
        if edit.change_request is not None:
            data["change_request"] = ChangeRequestSerializer(edit.change_request).data
            return Response(data, status=status.HTTP_202_ACCEPTED)
        return Response(data)


class LockSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class PolicyLockView(APIView):
    """POST locks the policy (approver role, with a reason); audited. See ``retention.services.policy_lock``."""

    unlock = False

    def get_permissions(self):
        doing = "unlocking a retention policy" if self.unlock else "locking a retention policy"
        return [role_required(Role.APPROVER, doing=doing)()]

    @extend_schema(
        operation_id="retention_policy_lock",
        request=LockSerializer,
        responses=PolicySerializer,
        examples=api_examples.POLICY_LOCK,
    )
    def post(self, request, pk: int):
        """Lock a retention policy (approver role, with a reason)."""
        get_object_or_404(restrict_policies(RetentionPolicy.objects.all(), request.user), pk=pk)
        ser = LockSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        service = services.policy_unlock if self.unlock else services.policy_lock
        policy = service(
            policy_id=pk,
            actor=Actor.for_request(request),
            reason=ser.validated_data["reason"],
            request_id=request_id_of(request),
        )
        return Response(PolicySerializer(policy).data)


class PolicyUnlockView(PolicyLockView):
    """POST unlocks the policy during its cooling-off (approver role, not the one who locked it); audited."""

    unlock = True

    @extend_schema(
        operation_id="retention_policy_unlock",
        request=LockSerializer,
        responses=PolicySerializer,
        examples=api_examples.POLICY_UNLOCK,
    )
    def post(self, request, pk: int):
        """Unlock a policy during its cooling-off (approver role, not the one who locked it)."""
        return super().post(request, pk)


class PolicyDryRunView(APIView):
    """What the policy would keep and propose now (the simulator on its rules). Changes nothing."""

    @extend_schema(
        operation_id="retention_policy_dry_run",
        responses=dict,
        examples=api_examples.POLICY_DRY_RUN,
    )
    def get(self, request, pk: int):
        policy = get_object_or_404(restrict_policies(RetentionPolicy.objects.all(), request.user), pk=pk)
        data = simulation_data(services.policy_dry_run(policy, team_names=visible_team_names(request.user)))
        data["policy"] = policy.pk
        data["enabled"] = policy.enabled
        return Response(data)
