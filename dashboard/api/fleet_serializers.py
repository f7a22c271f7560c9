"""API representations of the fleet."""

from rest_framework import serializers

from ckptfleet.api_fields import AsciiFloatField, AsciiIntegerField, FleetModelSerializer
from fleet.models import Host, Inventory, StorageLocation


class InventorySerializer(FleetModelSerializer):
    url = serializers.SerializerMethodField()
    location = serializers.CharField(source="location.name")
    host = serializers.CharField(source="host.name", default=None)
    duration_seconds = AsciiFloatField(read_only=True)

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
            "checksums_total",
            "checksums_done",
            "checksums_failed",
            "checksums_finished_at",
        ]

    def get_url(self, obj: Inventory) -> str:
        return f"/api/v1/inventories/{obj.pk}/"


class StorageLocationSerializer(FleetModelSerializer):
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
            "soft_delete_days",
            "trash_days",
            "fs_size_bytes",
            "fs_free_bytes",
            "fs_reported_at",
        ]
        read_only_fields = ["soft_delete_days", "trash_days", "fs_size_bytes", "fs_free_bytes", "fs_reported_at"]


class HostSerializer(FleetModelSerializer):
    locations = StorageLocationSerializer(many=True, read_only=True)

    class Meta:
        model = Host
        fields = [
            "id",
            "name",
            "site",
            "region",
            "description",
            "last_seen_at",
            "down_since",
            "down_reason",
            "down_label",
            "gpus",
            "locations",
        ]


class AgentPullItemSerializer(serializers.Serializer):
    """One file a host's agent should pull (for the schema; ``promotion.pulls.pending`` builds it)."""

    id = AsciiIntegerField()
    job = AsciiIntegerField()
    root = serializers.CharField()
    path = serializers.CharField(help_text="Relative to the root.")
    target = serializers.CharField(help_text="The absolute path the file goes to: root + '/' + path.")
    size = AsciiIntegerField()
    etag = serializers.CharField(allow_blank=True)
    sha256 = serializers.CharField(allow_null=True)
    source = serializers.CharField(help_text="s3://bucket/key, for messages.")
    url = serializers.URLField(help_text="A presigned GET of the exact object version.")
    expires_in = AsciiIntegerField(help_text="Seconds the URL stays valid from now.")


class AgentPullListSerializer(serializers.Serializer):
    host = serializers.CharField()
    items = AgentPullItemSerializer(many=True)
    unavailable = serializers.ListField(child=serializers.CharField())


class AgentPullResultSerializer(serializers.Serializer):
    id = AsciiIntegerField()
    result = serializers.ChoiceField(choices=["pulled", "skipped", "failed"])
    detail = serializers.CharField(required=False, allow_blank=True)
    size = AsciiIntegerField(required=False, min_value=0, help_text="Bytes the agent measured.")
    sha256 = serializers.CharField(required=False, allow_null=True, help_text="What the agent measured.")


class AgentPullReportSerializer(serializers.Serializer):
    results = AgentPullResultSerializer(many=True)


class AgentOffloadPartSerializer(serializers.Serializer):
    n = AsciiIntegerField(help_text="Part number, from 1.")
    offset = AsciiIntegerField(help_text="Where the part starts in the file.")
    size = AsciiIntegerField()
    url = serializers.URLField(help_text="A presigned UploadPart URL.")
    etag = serializers.CharField(required=False, help_text="Present when the store holds this part already.")


class AgentOffloadItemSerializer(serializers.Serializer):
    """One file a host's agent should upload (for the schema; ``promotion.pushes.pending`` builds it)."""

    id = AsciiIntegerField()
    job = AsciiIntegerField()
    root = serializers.CharField()
    path = serializers.CharField(help_text="Relative to the root.")
    source = serializers.CharField(help_text="The absolute path of the file: root + '/' + path.")
    target = serializers.CharField(help_text="s3://bucket/key, for messages.")
    size = AsciiIntegerField()
    sha256 = serializers.CharField(allow_null=True, help_text="Recorded before the offload, when known.")
    method = serializers.ChoiceField(choices=["put", "multipart"])
    expires_in = AsciiIntegerField(help_text="Seconds the URLs stay valid from now.")
    url = serializers.URLField(required=False, help_text="put: a presigned PUT URL.")
    headers = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="put: headers signed into the URL; send them all."
    )
    part_size = AsciiIntegerField(required=False)
    parts = AgentOffloadPartSerializer(many=True, required=False)
    sign = serializers.CharField(
        required=False, help_text="'sha256' (asked with defer=sha256): measure the file, then have it signed."
    )


class AgentOffloadClaimSerializer(serializers.Serializer):
    id = AsciiIntegerField()
    sha256 = serializers.CharField(help_text="What the agent measured reading the file: 64 lowercase hex digits.")


class AgentOffloadSignSerializer(serializers.Serializer):
    sign = AgentOffloadClaimSerializer(many=True)


class AgentOffloadListSerializer(serializers.Serializer):
    host = serializers.CharField()
    items = AgentOffloadItemSerializer(many=True)
    unavailable = serializers.ListField(child=serializers.CharField())


class AgentOffloadPartEtagSerializer(serializers.Serializer):
    n = AsciiIntegerField()
    etag = serializers.CharField()


class AgentOffloadResultSerializer(serializers.Serializer):
    id = AsciiIntegerField()
    result = serializers.ChoiceField(choices=["uploaded", "skipped", "failed"])
    detail = serializers.CharField(required=False, allow_blank=True)
    exists = serializers.BooleanField(required=False, help_text="skipped because an object is at the target key.")
    size = AsciiIntegerField(required=False, min_value=0, help_text="Bytes the agent read.")
    sha256 = serializers.CharField(required=False, allow_null=True, help_text="What the agent measured.")
    md5 = serializers.CharField(required=False, allow_null=True, help_text="What the agent measured.")
    parts = AgentOffloadPartEtagSerializer(many=True, required=False, help_text="multipart: every part's ETag.")


class AgentOffloadReportSerializer(serializers.Serializer):
    results = AgentOffloadResultSerializer(many=True)
