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
