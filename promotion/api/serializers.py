"""API representations of promotions and of a promotion request."""

from rest_framework import serializers

from catalog.choices import Importance
from ckptfleet.api_fields import AsciiIntegerField, AsciiPrimaryKeyRelatedField, FleetModelSerializer
from fleet.models import StorageLocation
from promotion.choices import RestoreTier
from promotion.models import PromotionItem, PromotionJob
from promotion.moves import MOVE_CLASSES
from promotion.services import MAX_RESTORE_DAYS


class PromotionItemSerializer(FleetModelSerializer):
    class Meta:
        model = PromotionItem
        fields = [
            "path",
            "source_key",
            "target_key",
            "size",
            "etag",
            "version_id",
            "source_storage_class",
            "state",
            "detail",
            "done_at",
            "sha256",
            "verified_at",
        ]


class PromotionJobSerializer(FleetModelSerializer):
    source_location = serializers.CharField(source="source_copy.location.name")
    target_location_name = serializers.CharField(source="target_location.name")
    percent = AsciiIntegerField()

    class Meta:
        model = PromotionJob
        fields = [
            "id",
            "checkpoint",
            "source_copy",
            "source_location",
            "target_location",
            "target_location_name",
            "target_storage_class",
            "target_tier",
            "method",
            "state",
            "in_place",
            "restore_days",
            "restore_tier",
            "reason",
            "requested_label",
            "requested_at",
            "started_at",
            "finished_at",
            "cancelled_label",
            "items_total",
            "items_done",
            "items_blocked",
            "bytes_total",
            "bytes_done",
            "percent",
            "error",
            "direction",
            "origin",
            "verified_at",
            "verifying_since",
            "verify_attempts",
            "verify_detail",
            "source_deletion",
            "source_outcome",
            "plan",
        ]


class PromotionRequestSerializer(serializers.Serializer):
    """Name a checkpoint (its best complete copy is read) or one copy, and where it should go."""

    checkpoint = AsciiIntegerField(required=False)
    copy = AsciiIntegerField(required=False)
    target_location = AsciiPrimaryKeyRelatedField(queryset=StorageLocation.objects.all())
    target_storage_class = serializers.CharField(required=False, allow_blank=True, default="")
    restore_days = AsciiIntegerField(required=False, default=7, min_value=1, max_value=MAX_RESTORE_DAYS)
    restore_tier = serializers.ChoiceField(choices=RestoreTier.choices, required=False, default=RestoreTier.STANDARD)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class MoveRequestSerializer(serializers.Serializer):
    """Name checkpoints, or a run (all its checkpoints, or those matching the filters), and where they go."""

    checkpoints = serializers.ListField(child=AsciiIntegerField(min_value=1), required=False, max_length=500)
    run = AsciiIntegerField(required=False, min_value=1)
    older_than_days = AsciiIntegerField(
        required=False,
        min_value=1,
        max_value=36500,
        allow_null=True,
        help_text="Only checkpoints saved more than N days ago (the sidecar's saved_at, else the files' mtime or the "
        "objects' LastModified; first seen only when none is known).",
    )
    importance = serializers.ListField(
        child=serializers.ChoiceField(choices=Importance.choices), required=False, max_length=10
    )
    target_location = AsciiPrimaryKeyRelatedField(queryset=StorageLocation.objects.all())
    target_storage_class = serializers.ChoiceField(choices=[(c, c) for c in MOVE_CLASSES])
    source_location = AsciiPrimaryKeyRelatedField(
        queryset=StorageLocation.objects.all(), required=False, allow_null=True
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)

    def validate(self, attrs):
        if not attrs.get("checkpoints") and not attrs.get("run"):
            raise serializers.ValidationError("name checkpoints or a run")
        return attrs
