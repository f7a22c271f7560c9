"""The promotions API: list and read jobs, preview and request one, cancel one. Writes go through the services."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from access.scoping import restrict_runs
from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy
from ckptfleet.errors import DomainError
from promotion import api_examples, moves, selectors, services
from promotion.api.serializers import (
    CancelSerializer,
    MoveRequestSerializer,
    PromotionItemSerializer,
    PromotionJobSerializer,
    PromotionRequestSerializer,
)


def _source(data, user) -> tuple[Checkpoint | None, CheckpointCopy | None]:
    """The checkpoint or copy named, among those of runs ``user`` may see (others are not found)."""
    checkpoint = copy = None
    if data.get("copy"):
        copies = restrict_runs(CheckpointCopy.objects.all(), user, run_path="checkpoint__run__")
        copy = copies.filter(pk=data["copy"]).select_related("checkpoint", "location").first()
        if copy is None:
            raise DomainError(f"there is no checkpoint copy {data['copy']}", code="not_found", http_status=404)
    if data.get("checkpoint"):
        checkpoint = (
            restrict_runs(Checkpoint.objects.all(), user, run_path="run__").filter(pk=data["checkpoint"]).first()
        )
        if checkpoint is None:
            raise DomainError(f"there is no checkpoint {data['checkpoint']}", code="not_found", http_status=404)
    if copy is None and checkpoint is None:
        raise DomainError("name a checkpoint or a copy to promote", code="no_source")
    return checkpoint, copy


@extend_schema_view(
    list=extend_schema(examples=api_examples.PROMOTION),
    retrieve=extend_schema(examples=api_examples.PROMOTION),
)
class PromotionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Promotions of checkpoint copies to hotter tiers, with their progress (bytes_done of bytes_total)."""

    serializer_class = PromotionJobSerializer
    filterset_fields = ["state", "checkpoint", "method"]

    def get_queryset(self):
        return selectors.job_list(user=self.request.user)

    @extend_schema(
        request=PromotionRequestSerializer,
        responses={201: PromotionJobSerializer},
        examples=api_examples.PROMOTION_CREATE,
    )
    def create(self, request):
        """Request a promotion (operator role). Answers the job; its work starts once the request commits."""
        given = PromotionRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        checkpoint, copy = _source(data, request.user)
        job = services.promote(
            checkpoint=checkpoint,
            copy=copy,
            target_location=data["target_location"],
            target_storage_class=data["target_storage_class"],
            restore_days=data["restore_days"],
            restore_tier=data["restore_tier"],
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=getattr(request, "request_id", ""),
        )
        return Response(PromotionJobSerializer(selectors.job_detail(job.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=PromotionRequestSerializer, responses={200: dict}, examples=api_examples.PROMOTION_PREVIEW)
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """What a promotion would do: method, files, bytes, target tier and money per month. Changes nothing."""
        given = PromotionRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        checkpoint, copy = _source(data, request.user)
        if copy is None:
            copy = services.best_source(checkpoint, data["target_location"])
        plan = services.promotion_plan(
            copy=copy,
            target_location=data["target_location"],
            target_storage_class=data["target_storage_class"],
            restore_days=data["restore_days"],
            restore_tier=data["restore_tier"],
        )
        return Response(plan.as_dict())

    @extend_schema(
        request=CancelSerializer, responses={200: PromotionJobSerializer}, examples=api_examples.PROMOTION_CANCEL
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel an open promotion (operator role); what was copied already stays."""
        job = self.get_object()
        given = CancelSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        services.cancel(
            job=job,
            actor=Actor.for_request(request),
            reason=given.validated_data["reason"],
            request_id=getattr(request, "request_id", ""),
        )
        return Response(PromotionJobSerializer(selectors.job_detail(job.pk)).data)

    @extend_schema(responses={200: PromotionItemSerializer(many=True)}, examples=api_examples.PROMOTION_ITEMS)
    @action(detail=True, methods=["get"])
    def items(self, request, pk=None):
        """The frozen files of a promotion, each with its state."""
        job = self.get_object()
        page = self.paginate_queryset(selectors.job_items(job).order_by("-id"))
        return self.get_paginated_response(PromotionItemSerializer(page, many=True).data)


def _move_selection(data, user) -> list[Checkpoint]:
    return selectors.move_candidates(
        user=user,
        checkpoint_ids=data.get("checkpoints") or None,
        run_id=data.get("run"),
        older_than_days=data.get("older_than_days"),
        importance=data.get("importance") or None,
    )


class MoveViewSet(viewsets.GenericViewSet):
    """Moves (demote to a colder bucket or storage class, offload from a host): the jobs are promotions' jobs with
    ``direction`` demote or offload, listed and followed at ``/api/v1/promotions/``."""

    serializer_class = PromotionJobSerializer

    def get_queryset(self):
        return selectors.job_list(user=self.request.user).exclude(direction="promote")

    @extend_schema(
        summary="Request a move",
        request=MoveRequestSerializer,
        responses={201: PromotionJobSerializer(many=True)},
        examples=api_examples.MOVE_CREATE,
    )
    def create(self, request):
        """Move checkpoints to a colder tier (operator role): one job per checkpoint that may move; the plan's
        exclusions are in each job's audit event. The source of each is freed only after its new copy verifies,
        through a scheduled deletion (its grace period and approvals apply)."""
        given = MoveRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        jobs = moves.request_move(
            checkpoints=_move_selection(data, request.user),
            target_location=data["target_location"],
            target_storage_class=data["target_storage_class"],
            source_location=data.get("source_location"),
            reason=data["reason"],
            actor=Actor.for_request(request),
            request_id=getattr(request, "request_id", ""),
        )
        detail = [selectors.job_detail(job.pk) for job in jobs]
        return Response(PromotionJobSerializer(detail, many=True).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Preview a move",
        request=MoveRequestSerializer,
        responses={200: dict},
        examples=api_examples.MOVE_PREVIEW,
    )
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """What a move would do: per checkpoint and in total the files, bytes, monthly saving, one-off charges,
        payback, method and how the source is freed; what it leaves out and why; the newest restorable
        checkpoint of each run that stays readable. Changes nothing."""
        given = MoveRequestSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        plan = moves.move_plan(
            checkpoints=_move_selection(data, request.user),
            target_location=data["target_location"],
            target_storage_class=data["target_storage_class"],
            source_location=data.get("source_location"),
        )
        return Response(plan.as_dict())
