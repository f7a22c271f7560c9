"""API of approvals: list change requests, and approve, reject or cancel one (``approvals.services``).

Lists show what the person may see (team scoping, by each kind's owner); every refusal is a 4xx in the
one error shape (``ckptfleet.errors``): 403 for the requester approving their own change or a missing
role, 404 for an unknown or unseen request, 409 for one that is no longer awaiting approval, changed
since it was asked for, or refused by a retention lock.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.permissions import role_required
from access.roles import Role
from approvals import api_examples, services
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from approvals.registry import kind_of
from approvals.selectors import restrict_changes
from audit.actor import Actor
from ckptfleet.api_fields import FleetModelSerializer
from ckptfleet.errors import DomainError

LIST_LIMIT = 500


class ChangeRequestSerializer(FleetModelSerializer):
    lines = serializers.SerializerMethodField(help_text="The change in words, one line per field.")

    class Meta:
        model = ChangeRequest
        fields = [
            "id",
            "kind",
            "target_type",
            "target_id",
            "target_label",
            "change",
            "lines",
            "reason",
            "state",
            "requested_label",
            "requested_at",
            "decided_label",
            "decided_at",
            "decision_note",
        ]
        read_only_fields = fields

    def get_lines(self, obj: ChangeRequest) -> list[str]:
        return kind_of(obj.kind).describe(obj.change)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


def _visible(request, pk) -> ChangeRequest:
    change = restrict_changes(ChangeRequest.objects.filter(pk=pk), request.user).first()
    if change is None:
        raise Http404("no such change request")
    return change


class ChangeRequestListView(APIView):
    """Change requests, newest first; ``?state=`` one state (default: awaiting approval), ``all`` for every one."""

    @extend_schema(
        operation_id="change_request_list",
        parameters=[
            OpenApiParameter(
                "state", str, description="awaiting_approval (default), applied, rejected, cancelled, expired, or all"
            )
        ],
        responses=ChangeRequestSerializer(many=True),
    )
    def get(self, request):
        state = request.query_params.get("state", ChangeState.AWAITING_APPROVAL)
        rows = restrict_changes(ChangeRequest.objects.all(), request.user)
        if state != "all":
            if state not in ChangeState.values:
                raise DomainError(f"state must be one of {', '.join(ChangeState.values)} or all")
            rows = rows.filter(state=state)
        rows = rows.order_by("-requested_at", "-pk")[:LIST_LIMIT]
        return Response(ChangeRequestSerializer(rows, many=True).data)


class ChangeRequestDetailView(APIView):
    @extend_schema(operation_id="change_request_read", responses=ChangeRequestSerializer)
    def get(self, request, pk: int):
        """One change request, with what it would change."""
        return Response(ChangeRequestSerializer(_visible(request, pk)).data)


class _Decision(APIView):
    def _done(self, request, pk: int, call) -> Response:
        change = _visible(request, pk)
        ser = ReasonSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        done = call(change, Actor.for_request(request), ser.validated_data["reason"], request_id_of(request))
        return Response(ChangeRequestSerializer(done).data)


class ChangeRequestApproveView(_Decision):
    """Approve and apply (approver role, not the person who asked)."""

    def get_permissions(self):
        return [role_required(Role.APPROVER, doing="approving a change")()]

    @extend_schema(
        operation_id="change_request_approve",
        request=None,
        responses=ChangeRequestSerializer,
        examples=api_examples.CHANGE_APPROVE,
    )
    def post(self, request, pk: int):
        return self._done(
            request, pk, lambda c, actor, _reason, rid: services.approve_change(change=c, actor=actor, request_id=rid)
        )


class ChangeRequestRejectView(_Decision):
    """Reject, with a reason (approver role, not the person who asked)."""

    def get_permissions(self):
        return [role_required(Role.APPROVER, doing="rejecting a change")()]

    @extend_schema(
        operation_id="change_request_reject",
        request=ReasonSerializer,
        responses=ChangeRequestSerializer,
        examples=api_examples.CHANGE_REJECT,
    )
    def post(self, request, pk: int):
        return self._done(
            request,
            pk,
            lambda c, actor, reason, rid: services.reject_change(change=c, actor=actor, reason=reason, request_id=rid),
        )


class ChangeRequestCancelView(_Decision):
    """Withdraw one's own request (or, for an admin, anyone's)."""

    @extend_schema(
        operation_id="change_request_cancel",
        request=ReasonSerializer,
        responses=ChangeRequestSerializer,
        examples=api_examples.CHANGE_CANCEL,
    )
    def post(self, request, pk: int):
        return self._done(
            request,
            pk,
            lambda c, actor, reason, rid: services.cancel_change(change=c, actor=actor, reason=reason, request_id=rid),
        )
