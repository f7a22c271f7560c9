"""API representations of the fleet."""

from rest_framework import serializers

from fleet.models import Host, Inventory, StorageLocation


class InventorySerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    location = serializers.CharField(source="location.name")
    host = serializers.CharField(source="host.name", default=None)
    duration_seconds = serializers.FloatField(read_only=True)

    class Meta:
        model = Inventory
        fields = [
            "id",
            "url",
            "status",
            "location",
            "host",
            "source",
            "agent",
            "taken_at",
            "received_at",
            "started_at",
            "finished_at",
            "duration_seconds",
            "upload_bytes",
            "files_count",
            "bytes_total",
            "files_added",
            "files_changed",
            "files_gone",
            "checkpoints_found",
            "error",
            "error_line",
        ]

    def get_url(self, obj: Inventory) -> str:
        return f"/api/v1/inventories/{obj.pk}/"


class StorageLocationSerializer(serializers.ModelSerializer):
    host = serializers.CharField(source="host.name", default=None)

    class Meta:
        model = StorageLocation
        fields = [
            "id",
            "name",
            "kind",
            "tier",
            "host",
            "root_path",
            "path_template",
            "site",
            "region",
            "last_applied_at",
        ]


class HostSerializer(serializers.ModelSerializer):
    locations = StorageLocationSerializer(many=True, read_only=True)

    class Meta:
        model = Host
        fields = ["id", "name", "site", "region", "description", "last_seen_at", "locations"]
