"""The API of the operator actions: the same services as the pages, the same refusals as JSON.

    GET  pins/                      active and past pins (?checkpoint=, ?active=1)
    POST pins/                      {"checkpoint", "reason"}
    POST pins/{id}/unpin/           {"reason"?}
    GET  holds/                     (?run=, ?checkpoint=, ?mode=, ?active=1)
    POST holds/                     {"run", "checkpoint"?, "reason", "case_ref", "mode"?, "retain_until"?}
    POST holds/{id}/release/        {"reason", "case_ref"? (required for a governance hold)}
    POST holds/{id}/extend/         {"retain_until", "reason"}: a compliance hold's date, later only
    GET  deletions/                 (?checkpoint=, ?state=)
    GET  deletions/{id}/            one job; deletions/{id}/items/ its frozen list
    POST deletions/                 {"checkpoint", "copy"?, "reason"}
    GET  deletions/preview/         ?checkpoint=&copy=: what would go, cost and remain, and any refusal
    POST deletions/{id}/approve/    POST deletions/{id}/cancel/ {"reason"}
    POST /api/v1/orphans/cleanup/preview/  {"kind", "location", "prefix", "run"?}: what cleaning up one orphan group
                                    (as /api/v1/orphans/ groups them) would remove and free, and any refusal
    POST /api/v1/orphans/cleanup/          the same and {"reason"}: schedule it (a deletion of scope "orphans")

Reads need any role; writes the operator role (approve: approver), checked by the services,
which also refuse what the promises forbid, for admins too. Errors answer {"error", "detail"}.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.scoping import restrict
from actions import api_examples, orphans, services, softdelete
from actions.models import DeletionItem, DeletionJob, Hold, HoldMode, Pin
from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy, Run
from ckptfleet.api_fields import AsciiIntegerField, FleetModelSerializer
from ckptfleet.errors import DomainError
from ckptfleet.params import parse_id


def _get(model, pk, what: str, request):
    pk = parse_id(pk, what)
    try:
        return restrict(model.objects.all(), request.user).get(pk=pk)
    except model.DoesNotExist:
        raise DomainError(f"{what} {pk} does not exist", code="not_found", http_status=404) from None


class PinSerializer(FleetModelSerializer):
    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = Pin
        fields = ["id", "checkpoint", "reason", "pinned_label", "pinned_at", "unpinned_label", "unpinned_at", "active"]


class HoldSerializer(FleetModelSerializer):
    active = serializers.BooleanField(read_only=True)
    releasable_after = serializers.SerializerMethodField(
        help_text="A compliance hold: nobody can release it before this (its retain-until date)."
    )

    class Meta:
        model = Hold
        fields = [
            "id",
            "run",
            "checkpoint",
            "mode",
            "retain_until",
            "releasable_after",
            "reason",
            "case_ref",
            "placed_label",
            "placed_at",
            "released_label",
            "released_at",
            "release_reason",
            "release_case_ref",
            "mirror_state",
            "mirror_detail",
            "mirrored_at",
            "mirror_mode",
            "mirror_retain_until",
            "mirror_objects",
            "mirror_refused",
            "active",
        ]

    def get_releasable_after(self, hold: Hold) -> str | None:
        return hold.retain_until.isoformat() if hold.mode == HoldMode.COMPLIANCE and hold.retain_until else None


class DeletionJobSerializer(FleetModelSerializer):
    class Meta:
        model = DeletionJob
        fields = [
            "id",
            "scope",
            "checkpoint",
            "copy",
            "orphan_kind",
            "orphan_location",
            "orphan_prefix",
            "orphan_run",
            "state",
            "reason",
            "origin",
            "requested_label",
            "requested_at",
            "needs_approval",
            "approval_reasons",
            "approved_label",
            "approved_at",
            "execute_after",
            "cancelled_label",
            "cancelled_at",
            "started_at",
            "heartbeat_at",
            "finished_at",
            "items_total",
            "bytes_total",
            "items_deleted",
            "items_blocked",
            "outcome",
            "proof_state",
            "proof_at",
            "proof_detail",
            "proof_failures",
            "bytes_reclaimed",
            "bytes_in_trash",
            "bytes_unproven",
            "money_reclaimed",
            "money_currency",
        ]


class DeletionItemSerializer(FleetModelSerializer):
    class Meta:
        model = DeletionItem
        fields = [
            "id",
            "kind",
            "copy",
            "location",
            "path",
            "version_id",
            "upload_id",
            "etag",
            "size",
            "mtime",
            "state",
            "detail",
            "done_at",
        ]


class PinInput(serializers.Serializer):
    checkpoint = AsciiIntegerField()
    reason = serializers.CharField(allow_blank=True, required=False, default="")


class ReasonInput(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, required=False, default="")


class HoldInput(serializers.Serializer):
    run = AsciiIntegerField()
    checkpoint = AsciiIntegerField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(allow_blank=True, required=False, default="")
    case_ref = serializers.CharField(allow_blank=True, required=False, default="")
    mode = serializers.CharField(required=False, default=HoldMode.LEGAL, help_text="legal, governance or compliance")
    retain_until = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Compliance only: a date (YYYY-MM-DD, 00:00 UTC) or an ISO 8601 time with a zone, in the future",
    )


class ReleaseInput(serializers.Serializer):
    reason = serializers.CharField(allow_blank=True, required=False, default="")
    case_ref = serializers.CharField(allow_blank=True, required=False, default="")


class ExtendInput(serializers.Serializer):
    retain_until = serializers.CharField()
    reason = serializers.CharField(allow_blank=True, required=False, default="")


class DeletionInput(serializers.Serializer):
    checkpoint = AsciiIntegerField()
    copy = AsciiIntegerField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(allow_blank=True, required=False, default="")
    confirm_children = serializers.BooleanField(
        required=False,
        default=False,
        help_text="True to delete a checkpoint other runs started from (the preview's child_runs names them).",
    )


def _valid(serializer_class, request) -> dict:
    data = serializer_class(data=request.data)
    data.is_valid(raise_exception=True)
    return data.validated_data


def _active_filter(queryset, request, field: str):
    if request.query_params.get("active") in ("1", "true", "yes"):
        queryset = queryset.filter(**{f"{field}__isnull": True})
    return queryset


ACTIVE_PARAMETER = OpenApiParameter("active", bool, description="true: only those still in force.")


@extend_schema_view(
    list=extend_schema(summary="List pins", parameters=[ACTIVE_PARAMETER], examples=api_examples.PIN),
    retrieve=extend_schema(summary="One pin", examples=api_examples.PIN),
)
class PinViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = Pin.objects.all()
    serializer_class = PinSerializer
    filterset_fields = ["checkpoint"]

    def get_queryset(self):
        return _active_filter(restrict(super().get_queryset(), self.request.user), self.request, "unpinned_at")

    @extend_schema(request=PinInput, responses={201: PinSerializer}, examples=api_examples.PIN_CREATE)
    def create(self, request):
        data = _valid(PinInput, request)
        checkpoint = _get(Checkpoint, data["checkpoint"], "checkpoint", request)
        made = services.pin(
            checkpoint=checkpoint,
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(PinSerializer(made).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ReasonInput, responses={200: PinSerializer}, examples=api_examples.PIN_UNPIN)
    @action(detail=True, methods=["post"])
    def unpin(self, request, pk=None):
        """Unpin a checkpoint, with a reason."""
        data = _valid(ReasonInput, request)
        done = services.unpin(
            pin=_get(Pin, pk, "pin", request),
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(PinSerializer(done).data)


@extend_schema_view(
    list=extend_schema(summary="List holds", parameters=[ACTIVE_PARAMETER], examples=api_examples.HOLD),
    retrieve=extend_schema(summary="One hold", examples=api_examples.HOLD),
)
class HoldViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = Hold.objects.all()
    serializer_class = HoldSerializer
    filterset_fields = ["run", "checkpoint", "case_ref", "mode"]

    def get_queryset(self):
        return _active_filter(restrict(super().get_queryset(), self.request.user), self.request, "released_at")

    @extend_schema(request=HoldInput, responses={201: HoldSerializer}, examples=api_examples.HOLD_CREATE)
    def create(self, request):
        data = _valid(HoldInput, request)
        run = _get(Run, data["run"], "run", request)
        checkpoint = _get(Checkpoint, data["checkpoint"], "checkpoint", request) if data["checkpoint"] else None
        made = services.hold(
            run=run,
            checkpoint=checkpoint,
            reason=data["reason"],
            case_ref=data["case_ref"],
            mode=data["mode"],
            retain_until=data["retain_until"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(HoldSerializer(made).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ReleaseInput, responses={200: HoldSerializer}, examples=api_examples.HOLD_RELEASE)
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        """Release a hold, with a reason (not the person who placed it)."""
        data = _valid(ReleaseInput, request)
        done = services.release(
            hold=_get(Hold, pk, "hold", request),
            reason=data["reason"],
            case_ref=data["case_ref"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(HoldSerializer(done).data)

    @extend_schema(request=ExtendInput, responses={200: HoldSerializer}, examples=api_examples.HOLD_EXTEND)
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        """Move a compliance hold's retain-until date later; never earlier."""
        data = _valid(ExtendInput, request)
        done = services.extend_hold(
            hold=_get(Hold, pk, "hold", request),
            retain_until=data["retain_until"],
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(HoldSerializer(done).data)


class DeletionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = DeletionJob.objects.all()
    serializer_class = DeletionJobSerializer
    filterset_fields = ["checkpoint", "state", "origin"]

    def get_queryset(self):
        return restrict(super().get_queryset(), self.request.user)

    @extend_schema(request=DeletionInput, responses={201: DeletionJobSerializer}, examples=api_examples.DELETION_CREATE)
    def create(self, request):
        data = _valid(DeletionInput, request)
        checkpoint = _get(Checkpoint, data["checkpoint"], "checkpoint", request)
        copy = _get(CheckpointCopy, data["copy"], "copy", request) if data["copy"] else None
        job = services.schedule_deletion(
            checkpoint=checkpoint,
            copy=copy,
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
            confirm_children=data["confirm_children"],
        )
        return Response(DeletionJobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("checkpoint", int, required=True),
            OpenApiParameter("copy", int, required=False),
        ],
        responses={200: dict},
    )
    @action(detail=False, methods=["get"])
    def preview(self, request):
        """What a deletion would remove, cost per month and leave restorable, and which promise refuses it."""
        checkpoint = _get(Checkpoint, request.query_params.get("checkpoint"), "checkpoint", request)
        raw_copy = request.query_params.get("copy")
        copy = _get(CheckpointCopy, raw_copy, "copy", request) if raw_copy else None
        p = services.preview(checkpoint=checkpoint, copy=copy)
        return Response(
            {
                "checkpoint": checkpoint.pk,
                "copy": copy.pk if copy else None,
                "allowed": p.allowed,
                "refusal": p.refusal,
                "refusal_code": p.refusal_code or None,
                "promise": p.promise,
                "needs_approval": p.needs_approval,
                "approvals_required": p.approvals_required,
                "approval_reasons": p.approval_reasons,
                # The locked retention policies that keep the checkpoint, and the approvals they add (issue 27).
                "kept_by": [k.as_dict() for k in p.kept_by],
                "kept_by_approvals": p.kept_approvals,
                "child_runs": [{"id": r.pk, "team": r.team.name, "name": r.name} for r in p.child_runs],
                "left_in_place": p.archived_stay,
                "left_in_place_bytes": p.archived_stay_bytes,
                "copies": [
                    {
                        "copy": part.copy.pk,
                        "location": part.copy.location.name,
                        "files": part.files,
                        "bytes": part.bytes,
                        "monthly_cost": str(part.monthly_cost) if part.monthly_cost is not None else None,
                    }
                    for part in p.parts
                ],
                "files": p.files,
                "bytes": p.bytes,
                "freed_bytes": p.freed_bytes,  # bytes less left_in_place_bytes
                "monthly_cost": str(p.monthly_cost) if p.monthly_cost is not None else None,
                "currency": p.currency,
                "early_deletion": {
                    "charge": str(p.early_deletion.rounded),
                    "objects": p.early_deletion.objects,
                    "bytes": p.early_deletion.bytes,
                    "unpriced_objects": p.early_deletion.unpriced_objects,
                    "text": f"early-deletion charge: {p.early_deletion.describe(p.currency)}",
                },
                "newest_restorable_before": p.newest_before.pk if p.newest_before else None,
                "newest_restorable_after": p.newest_after.pk if p.newest_after else None,
                "newest_restorable_after_verified": p.newest_after_verified,
                "grace_days": p.grace_days,
                "sample": p.sample,
            }
        )

    @extend_schema(responses={200: DeletionItemSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def items(self, request, pk=None):
        """The frozen files of a deletion, each with its state."""
        job = self.get_object()
        page = self.paginate_queryset(DeletionItem.objects.filter(job=job))
        return self.get_paginated_response(DeletionItemSerializer(page, many=True).data)

    @extend_schema(
        request=None,
        responses={200: DeletionJobSerializer},
        examples=api_examples.DELETION_APPROVE,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve a deletion (approver role, not the person who asked)."""
        job = services.approve(
            job=_get(DeletionJob, pk, "deletion", request),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(DeletionJobSerializer(job).data)

    @extend_schema(request=ReasonInput, responses={200: DeletionJobSerializer}, examples=api_examples.DELETION_CANCEL)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a scheduled deletion, with a reason."""
        data = _valid(ReasonInput, request)
        job = services.cancel(
            job=_get(DeletionJob, pk, "deletion", request),
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(DeletionJobSerializer(job).data)

    @extend_schema(
        request=ReasonInput,
        responses={200: DeletionJobSerializer},
        examples=api_examples.DELETION_RESTORE,
    )
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        """Undo an executed soft deletion while its recovery window is open: one audited action for the job."""
        data = _valid(ReasonInput, request)
        job = softdelete.restore(
            job=_get(DeletionJob, pk, "deletion", request),
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(DeletionJobSerializer(job).data)


# --- orphan clean-up -------------------------------------------------------------------------------


class OrphanGroupInput(serializers.Serializer):
    kind = serializers.CharField(help_text="unclaimed, temporary, multipart or deleted_run (as /api/v1/orphans/).")
    location = AsciiIntegerField(help_text="The location id of the group.")
    prefix = serializers.CharField(
        allow_blank=True, required=False, default="", help_text="The group's run directory; empty: the root."
    )
    run = AsciiIntegerField(required=False, allow_null=True, default=None, help_text="deleted_run only.")


class OrphanCleanupInput(OrphanGroupInput):
    reason = serializers.CharField(allow_blank=True, required=False, default="")


def _cleanup_answer(p: orphans.OrphanCleanup) -> dict:
    return {
        "kind": p.kind,
        "location": p.location.pk,
        "prefix": p.prefix,
        "run": p.run.pk if p.run else None,
        "allowed": p.allowed,
        "refusal": p.refusal,
        "refusal_code": p.refusal_code or None,
        "files": p.files,
        "uploads": p.uploads,
        "items": p.items,
        "bytes": p.bytes,
        "uploads_of_unknown_size": p.uploads_unknown_size,
        "monthly_cost": str(p.monthly_cost) if p.monthly_cost is not None else None,
        "currency": p.currency,
        "needs_approval": p.needs_approval,
        "approvals_required": p.approvals_required,
        "approval_reasons": p.approval_reasons,
        "left_out": p.left_out,
        "kept_by": {what: [k.as_dict() for k in found] for what, found in p.kept_by.items()},
        "grace_days": p.grace_days,
        "trash_days": p.trash_days,
        "sample": p.sample,
    }


class OrphanCleanupPreviewView(APIView):
    @extend_schema(
        summary="Preview the clean-up of one orphan group",
        request=OrphanGroupInput,
        responses={200: dict},
        examples=api_examples.ORPHAN_CLEANUP_PREVIEW,
    )
    def post(self, request):
        """Exactly what cleaning up one group of /api/v1/orphans/ would remove (files, uploads, bytes, money a
        month, the first paths) and whether it may be scheduled; changes nothing."""
        data = _valid(OrphanGroupInput, request)
        p = orphans.preview(
            kind=data["kind"],
            location=data["location"],
            prefix=data["prefix"],
            run=data["run"],
            actor=Actor.for_request(request),
        )
        return Response(_cleanup_answer(p))


class OrphanCleanupView(APIView):
    @extend_schema(
        summary="Schedule the clean-up of one orphan group",
        request=OrphanCleanupInput,
        responses={201: DeletionJobSerializer},
        examples=api_examples.ORPHAN_CLEANUP,
    )
    def post(self, request):
        """Freeze the group's exact files and uploads into a deletion of scope "orphans" (grace period, approvals,
        cancel and execution as any deletion). The operator role, and a person who sees the whole fleet."""
        data = _valid(OrphanCleanupInput, request)
        job = orphans.schedule_cleanup(
            kind=data["kind"],
            location=data["location"],
            prefix=data["prefix"],
            run=data["run"],
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
        return Response(DeletionJobSerializer(job).data, status=status.HTTP_201_CREATED)
