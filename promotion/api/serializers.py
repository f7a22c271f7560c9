"""API representations of promotions and of a promotion request."""

from rest_framework import serializers

from fleet.models import StorageLocation
from promotion.choices import RestoreTier
from promotion.models import PromotionItem, PromotionJob
from promotion.services import MAX_RESTORE_DAYS


class PromotionItemSerializer(serializers.ModelSerializer):
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
        ]


class PromotionJobSerializer(serializers.ModelSerializer):
    source_location = serializers.CharField(source="source_copy.location.name")
    target_location_name = serializers.CharField(source="target_location.name")
    percent = serializers.IntegerField()

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
        ]


class PromotionRequestSerializer(serializers.Serializer):
    """Name a checkpoint (its best complete copy is read) or one copy, and where it should go."""

    checkpoint = serializers.IntegerField(required=False)
    copy = serializers.IntegerField(required=False)
    target_location = serializers.PrimaryKeyRelatedField(queryset=StorageLocation.objects.all())
    target_storage_class = serializers.CharField(required=False, allow_blank=True, default="")
    restore_days = serializers.IntegerField(required=False, default=7, min_value=1, max_value=MAX_RESTORE_DAYS)
    restore_tier = serializers.ChoiceField(choices=RestoreTier.choices, required=False, default=RestoreTier.STANDARD)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")
