"""API representations of runs, checkpoints and copies."""

from rest_framework import serializers

from catalog.models import Checkpoint, CheckpointCopy, Run


class CopySerializer(serializers.ModelSerializer):
    location = serializers.CharField(source="location.name")
    tier = serializers.CharField(source="location.tier")

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

    class Meta:
        model = Checkpoint
        fields = ["id", "team", "run", "step", "importance", "first_seen_at", "copies"]


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
