"""API representations of runs, checkpoints, copies and orphans."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.selectors import OrphanKind
from catalog.verification import failure_domain, summarize


class CopySerializer(serializers.ModelSerializer):
    location = serializers.CharField(source="location.name")
    tier = serializers.CharField(source="location.tier")
    failure_domain = serializers.SerializerMethodField()

    @extend_schema_field(serializers.CharField())
    def get_failure_domain(self, copy: CheckpointCopy) -> str:
        return failure_domain(copy.location)

    class Meta:
        model = CheckpointCopy
        fields = [
            "id",
            "location",
            "tier",
            "path",
            "format",
            "state",
            "reasons",
            "temporary",
            "verification",
            "verification_reasons",
            "failure_domain",
            "file_count",
            "bytes",
            "expected_files",
            "expected_bytes",
            "newest_mtime",
            "judged_at",
        ]


class CheckpointSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.name")
    team = serializers.CharField(source="run.team.name")
    copies = CopySerializer(source="present", many=True, read_only=True)
    verified_copies = serializers.SerializerMethodField(help_text="Present copies whose checksums are verified.")
    failure_domains = serializers.SerializerMethodField(
        help_text="The distinct failure domains of the verified copies: a host, or a bucket's region."
    )

    class Meta:
        model = Checkpoint
        fields = [
            "id",
            "team",
            "run",
            "step",
            "importance",
            "first_seen_at",
            "verified_copies",
            "failure_domains",
            "copies",
        ]

    @extend_schema_field(serializers.IntegerField())
    def get_verified_copies(self, checkpoint: Checkpoint) -> int:
        return summarize(checkpoint.present).verified

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_failure_domains(self, checkpoint: Checkpoint) -> list[str]:
        return list(summarize(checkpoint.present).domains)


class RunSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    checkpoint_count = serializers.IntegerField(read_only=True)
    copy_count = serializers.IntegerField(read_only=True)
    bytes = serializers.IntegerField(read_only=True, default=0)
    newest_step = serializers.IntegerField(read_only=True, allow_null=True)
    bad_copies = serializers.IntegerField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "team",
            "name",
            "status",
            "checkpoint_count",
            "copy_count",
            "bytes",
            "newest_step",
            "bad_copies",
            "created_at",
        ]


class OrphanGroupSerializer(serializers.Serializer):
    """Orphans of one kind at one location below one run directory."""

    kind = serializers.ChoiceField(choices=OrphanKind.choices)
    location_id = serializers.IntegerField()
    location = serializers.CharField(source="location_name")
    prefix = serializers.CharField(help_text="The run directory below the location root; empty: the root.")
    run_id = serializers.IntegerField(allow_null=True)
    run = serializers.CharField(source="run_label", help_text="team/run, for copies of a known run.")
    items = serializers.IntegerField(help_text="Files, copies or uploads, as the kind says.")
    files = serializers.IntegerField(help_text="Files (parts, for multipart uploads).")
    bytes = serializers.IntegerField(allow_null=True, help_text="Null when unknown.")
    oldest = serializers.DateTimeField(allow_null=True)
    newest = serializers.DateTimeField(allow_null=True)


# --- placement ------------------------------------------------------------------------------------


class TierShareSerializer(serializers.Serializer):
    tier = serializers.CharField()
    storage_class = serializers.CharField(help_text="Empty: the tier's default (a host's drives, a mount).")
    bytes = serializers.IntegerField()
    files = serializers.IntegerField()


class PlacedCopySerializer(serializers.Serializer):
    """One present copy: where it is, its state and verification, and the tiers its bytes sit in."""

    id = serializers.IntegerField(source="copy.pk")
    location_id = serializers.IntegerField(source="copy.location_id")
    location = serializers.CharField(source="location.name")
    location_tier = serializers.CharField(source="location.tier")
    host = serializers.CharField(source="host_name", help_text="Empty: a location of no host (a bucket).")
    site = serializers.CharField()
    region = serializers.CharField()
    failure_domain = serializers.CharField(source="domain")
    state = serializers.CharField(source="copy.state")
    verification = serializers.CharField(source="copy.verification")
    temporary = serializers.BooleanField(source="copy.temporary")
    bytes = serializers.IntegerField(source="copy.bytes")
    files = serializers.IntegerField(source="copy.file_count")
    tiers = TierShareSerializer(many=True, help_text="Bytes per tier and storage class (from the rollups).")


class PlacementColumnSerializer(serializers.Serializer):
    location_id = serializers.IntegerField(source="location.pk")
    location = serializers.CharField(source="location.name")
    kind = serializers.CharField(source="location.kind")
    tier = serializers.CharField(source="location.tier")
    host = serializers.SerializerMethodField()
    site = serializers.CharField(source="location.failure_site")
    region = serializers.CharField(source="location.failure_region")
    failure_domain = serializers.CharField(source="domain")

    @extend_schema_field(serializers.CharField())
    def get_host(self, column) -> str:
        return column.location.host.name if column.location.host_id else ""


class PlacementRowSerializer(serializers.Serializer):
    checkpoint_id = serializers.IntegerField(source="checkpoint.pk")
    step = serializers.IntegerField(source="checkpoint.step", allow_null=True)
    tag = serializers.CharField(source="checkpoint.tag")
    importance = serializers.CharField(source="checkpoint.importance")
    verified_copies = serializers.SerializerMethodField()
    failure_domains = serializers.ListField(source="domains", child=serializers.CharField())
    flags = serializers.ListField(child=serializers.CharField())
    copies = PlacedCopySerializer(many=True)

    @extend_schema_field(serializers.IntegerField())
    def get_verified_copies(self, row) -> int:
        return len(row.verified)


class FlagCountSerializer(serializers.Serializer):
    flag = serializers.CharField()
    label = serializers.CharField()
    help = serializers.CharField()
    count = serializers.IntegerField()


class RunPlacementSerializer(serializers.Serializer):
    """A page of a run's checkpoints against the locations holding its copies, and the run's flags."""

    columns = PlacementColumnSerializer(many=True)
    rows = PlacementRowSerializer(many=True)
    flags = FlagCountSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="The URL of the next page; null on the last.")


class CheckpointPlacementSerializer(serializers.Serializer):
    checkpoint_id = serializers.IntegerField()
    verified_copies = serializers.IntegerField()
    failure_domains = serializers.ListField(child=serializers.CharField())
    flags = FlagCountSerializer(many=True, help_text="The flags this checkpoint raises (count is 1).")
    copies = PlacedCopySerializer(many=True)


class FlaggedCheckpointSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="checkpoint.pk")
    run_id = serializers.IntegerField(source="checkpoint.run_id")
    run = serializers.SerializerMethodField()
    step = serializers.IntegerField(source="checkpoint.step", allow_null=True)
    tag = serializers.CharField(source="checkpoint.tag")
    importance = serializers.CharField(source="checkpoint.importance")
    flag = serializers.CharField()
    why = serializers.CharField()

    @extend_schema_field(serializers.CharField())
    def get_run(self, item) -> str:
        run = item["checkpoint"].run
        return f"{run.team.name}/{run.name}"
