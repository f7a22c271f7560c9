"""API of tiering policies, under /api/v1/retention/tiering-policies/: list, create, read, edit, preview, run.

The service is ``retention.tiering_policies``; the figures are the policy page's own.
"""

from __future__ import annotations

from decimal import Decimal

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.permissions import role_required
from access.roles import Role
from access.scoping import restrict_policies, visible_team_names
from approvals.api import ChangeRequestSerializer
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from audit.actor import Actor
from ckptfleet.api_fields import FleetModelSerializer
from ckptfleet.errors import DomainError
from retention import api_examples
from retention import tiering_policies as policies
from retention.models import TieringPolicy


def _rid(request) -> str:
    return getattr(request, "request_id", None) or request_id_of(request)


class TieringPolicySerializer(FleetModelSerializer):
    reason = serializers.CharField(write_only=True, required=False, allow_blank=True, default="")
    describe = serializers.CharField(read_only=True, help_text="The rule in words.")
    pending_changes = serializers.SerializerMethodField(
        help_text="Ids of change requests awaiting a second person (/api/v1/approvals/changes/<id>/)."
    )

    class Meta:
        model = TieringPolicy
        fields = [
            "id",
            "name",
            "team",
            "run",
            "action",
            "source_tier",
            "target_location",
            "target_storage_class",
            "run_ended_days",
            "min_age_hours",
            "except_milestones",
            "except_critical",
            "every_hours",
            "enabled",
            "describe",
            "created_label",
            "created_at",
            "updated_at",
            "last_run_at",
            "last_run_summary",
            "pending_changes",
            "reason",
        ]
        read_only_fields = ["created_label", "created_at", "updated_at", "last_run_at", "last_run_summary"]
        validators = []  # the service checks the whole rule, with its own messages

    def get_pending_changes(self, obj: TieringPolicy) -> list[int]:
        return list(
            ChangeRequest.objects.filter(
                target_type="tiering_policy", target_id=obj.pk, state=ChangeState.AWAITING_APPROVAL
            ).values_list("pk", flat=True)
        )


def _visible(request, pk: int) -> TieringPolicy:
    return get_object_or_404(restrict_policies(TieringPolicy.objects.all(), request.user), pk=pk)


class TieringPolicyListView(APIView):
    """Tiering policies; POST creates one (operator role), disabled; asking for it enabled files a change request."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [role_required(Role.OPERATOR, doing="creating a tiering policy")()]
        return super().get_permissions()

    @extend_schema(
        operation_id="tiering_policy_list",
        summary="List tiering policies",
        responses=TieringPolicySerializer(many=True),
    )
    def get(self, request):
        rows = restrict_policies(TieringPolicy.objects.all(), request.user).order_by("name", "pk")
        return Response(TieringPolicySerializer(rows, many=True).data)

    @extend_schema(
        operation_id="tiering_policy_create",
        summary="Create a tiering policy",
        request=TieringPolicySerializer,
        responses=TieringPolicySerializer,
        examples=api_examples.TIERING_POLICY_CREATE,
    )
    def post(self, request):
        ser = TieringPolicySerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        names = visible_team_names(request.user)
        if names is not None and (
            (d.get("run") and d["run"].team.name not in names) or (d.get("team") and d["team"].name not in names)
        ):
            raise Http404("no such run or team")
        policy = policies.policy_create(actor=Actor.for_request(request), request_id=_rid(request), **d)
        return Response(TieringPolicySerializer(policy).data, status=status.HTTP_201_CREATED)


class TieringPolicyDetailView(APIView):
    """One tiering policy; PATCH edits it (operator role). Enabling it, or changing it while enabled, answers 202
    with the change request a second person applies."""

    def get_permissions(self):
        if self.request.method == "PATCH":
            return [role_required(Role.OPERATOR, doing="editing a tiering policy")()]
        return super().get_permissions()

    @extend_schema(
        operation_id="tiering_policy_read", summary="Read a tiering policy", responses=TieringPolicySerializer
    )
    def get(self, request, pk: int):
        return Response(TieringPolicySerializer(_visible(request, pk)).data)

    @extend_schema(
        operation_id="tiering_policy_update",
        summary="Edit a tiering policy",
        request=TieringPolicySerializer,
        responses=TieringPolicySerializer,
        examples=api_examples.TIERING_POLICY_UPDATE,
    )
    def patch(self, request, pk: int):
        _visible(request, pk)
        ser = TieringPolicySerializer(data=request.data, partial=True)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        if {"team", "run"} & set(d):
            raise DomainError("a policy's team or run cannot change; create a policy for the other one")
        reason = d.pop("reason", "")
        edit = policies.policy_update(
            policy_id=pk, actor=Actor.for_request(request), reason=reason, request_id=_rid(request), **d
        )
        data = TieringPolicySerializer(edit.policy).data
        if edit.change_request is not None:
            data["change_request"] = ChangeRequestSerializer(edit.change_request).data
            return Response(data, status=status.HTTP_202_ACCEPTED)
        return Response(data)


def _money(value: Decimal | None) -> str | None:
    return None if value is None else f"{value.quantize(Decimal('0.01')):f}"


def preview_data(preview: policies.Preview) -> dict:
    sel = preview.selection
    data: dict = {
        "policy": sel.policy.pk,
        "action": sel.policy.action,
        "enabled": sel.policy.enabled,
        "selected": [s.checkpoint.pk for s in sel.selected],
        "skipped": [{"checkpoint": c.pk, "reason": why} for c, why in sel.skipped],
    }
    if preview.plan is not None:
        data["plan"] = preview.plan.as_dict()
    if sel.policy.action == "free_host":
        data["frees"] = [
            {
                "checkpoint": f["checkpoint"].pk,
                "copy": f["copy"].pk,
                "location": f["copy"].location.name,
                "bytes": f["bytes"],
                "monthly": _money(f["monthly"]),
                "keeps_copy": f["keeps"].pk,
                "keeps_location": f["keeps"].location.name,
                "refusal": f["refusal"],
            }
            for f in preview.frees
        ]
        data["monthly_saving"] = _money(preview.monthly_saving)
        data["currency"] = preview.currency
    return data


class TieringPolicyPreviewView(APIView):
    """What a run of the policy would ask for now, and what it leaves out with the reason. Changes nothing."""

    @extend_schema(operation_id="tiering_policy_preview", summary="Preview a tiering policy's run", responses=dict)
    def get(self, request, pk: int):
        return Response(preview_data(policies.preview(_visible(request, pk))))


class TieringRunSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class TieringPolicyRunView(APIView):
    """POST runs an enabled policy now (operator role), audited; the moves and deletions it asks for carry the
    policy's own actor and wait for approval like any policy's."""

    def get_permissions(self):
        return [role_required(Role.OPERATOR, doing="running a tiering policy")()]

    @extend_schema(
        operation_id="tiering_policy_run",
        summary="Run a tiering policy now",
        request=TieringRunSerializer,
        responses=dict,
        examples=api_examples.TIERING_POLICY_RUN,
    )
    def post(self, request, pk: int):
        _visible(request, pk)
        ser = TieringRunSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        summary = policies.policy_run(
            policy_id=pk,
            actor=Actor.for_request(request),
            reason=ser.validated_data["reason"] or "run now through the API",
            request_id=_rid(request),
        )
        return Response(
            {"policy": pk, "job_ids": summary.asked, "skipped": summary.skipped}, status=status.HTTP_202_ACCEPTED
        )
