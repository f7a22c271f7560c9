"""API representations of runs, checkpoints, copies and orphans."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.selectors import OrphanKind
from catalog.verification import failure_domain, summarize
from ckptfleet.api_fields import AsciiIntegerField, FleetModelSerializer
from fleet.choices import Tier


class TierShareSerializer(serializers.Serializer):
    tier = serializers.CharField()
    storage_class = serializers.CharField(help_text="Empty: the tier's default (a host's drives, a mount).")
    bytes = AsciiIntegerField()
    files = AsciiIntegerField()


def copy_tiers(copy: CheckpointCopy) -> list[dict]:
    """The copy's bytes per tier and storage class, coldest first.

    From ``CopyTierUsage`` (prefetch ``tier_usage``), which holds each file's own tier: the storage class
    a scan found mapped through the bucket's tier map (``Bucket.tier_of``), else the location's tier. A copy
    not rolled up yet is the whole copy at its location's tier, as the recovery view takes it.
    """
    rows = [
        {"tier": u.tier, "storage_class": u.storage_class, "bytes": u.bytes, "files": u.files}
        for u in copy.tier_usage.all()
    ]
    if not rows:
        rows = [{"tier": copy.location.tier, "storage_class": "", "bytes": copy.bytes, "files": copy.file_count}]
    order = {tier: i for i, tier in enumerate(Tier.values)}
    rows.sort(key=lambda r: (-order.get(r["tier"], len(order)), -r["bytes"], r["storage_class"]))
    return rows


class CopySerializer(FleetModelSerializer):
    location = serializers.CharField(source="location.name")
    location_tier = serializers.CharField(
        source="location.tier", help_text="The location's tier: where a host's files or unmapped classes sit."
    )
    tier = serializers.SerializerMethodField(
        help_text="The coldest tier holding any of the copy's bytes, from its files' storage classes: what a "
        "restore waits for. `tiers` has every tier and storage class with its bytes."
    )
    storage_class = serializers.SerializerMethodField(
        help_text="The storage class of those bytes (the one with the most bytes in that tier); empty on a host."
    )
    tiers = serializers.SerializerMethodField()
    failure_domain = serializers.SerializerMethodField()

    @extend_schema_field(serializers.ChoiceField(choices=Tier.choices))
    def get_tier(self, copy: CheckpointCopy) -> str:
        return copy_tiers(copy)[0]["tier"]

    @extend_schema_field(serializers.CharField())
    def get_storage_class(self, copy: CheckpointCopy) -> str:
        return copy_tiers(copy)[0]["storage_class"]

    @extend_schema_field(TierShareSerializer(many=True))
    def get_tiers(self, copy: CheckpointCopy) -> list[dict]:
        return copy_tiers(copy)

    @extend_schema_field(serializers.CharField())
    def get_failure_domain(self, copy: CheckpointCopy) -> str:
        return failure_domain(copy.location)

    class Meta:
        model = CheckpointCopy
        fields = [
            "id",
            "location",
            "location_tier",
            "tier",
            "storage_class",
            "tiers",
            "path",
            "format",
            "state",
            "reasons",
            "temporary",
            "verification",
            "verification_reasons",
            "verification_basis",
            "verified_at",
            "failure_domain",
            "file_count",
            "bytes",
            "expected_files",
            "expected_bytes",
            "newest_mtime",
            "judged_at",
            "made_from",
            "made_at",
            "made_by",
        ]
        extra_kwargs = {
            "made_from": {
                "help_text": "The copy the product wrote this one from (a move, an offload, a promotion), or null: "
                "only such a record lets the source's earlier checksum judge this copy (verification basis source)."
            },
            "verification": {"help_text": "disputed: copies disagree and nothing independent says which is right."},
            "verification_basis": {
                "help_text": "What decided the verification, strongest first: manifest (a checksum written at save "
                "time), source (the source's checksum from before the copy), format (the format's own checks), "
                "majority (of three or more copies), peers (the other copies agree); empty: nothing yet."
            },
        }


class CheckpointSerializer(FleetModelSerializer):
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
            "saved_at",
            "saved_source",
            "verified_copies",
            "failure_domains",
            "copies",
        ]

    @extend_schema_field(AsciiIntegerField())
    def get_verified_copies(self, checkpoint: Checkpoint) -> int:
        return summarize(checkpoint.present).verified

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_failure_domains(self, checkpoint: Checkpoint) -> list[str]:
        return list(summarize(checkpoint.present).domains)


class RunSerializer(FleetModelSerializer):
    team = serializers.CharField(source="team.name")
    checkpoint_count = AsciiIntegerField(read_only=True)
    copy_count = AsciiIntegerField(read_only=True)
    bytes = AsciiIntegerField(read_only=True, default=0)
    newest_step = AsciiIntegerField(read_only=True, allow_null=True)
    bad_copies = AsciiIntegerField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "team",
            "name",
            "status",
            "status_source",
            "status_changed_at",
            "status_reason",
            "status_by_label",
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
    location_id = AsciiIntegerField()
    location = serializers.CharField(source="location_name")
    prefix = serializers.CharField(help_text="The run directory below the location root; empty: the root.")
    run_id = AsciiIntegerField(allow_null=True)
    run = serializers.CharField(source="run_label", help_text="team/run, for copies of a known run.")
    items = AsciiIntegerField(help_text="Files, copies or uploads, as the kind says.")
    files = AsciiIntegerField(help_text="Files (parts, for multipart uploads).")
    bytes = AsciiIntegerField(allow_null=True, help_text="Null when unknown.")
    oldest = serializers.DateTimeField(allow_null=True)
    newest = serializers.DateTimeField(allow_null=True)


# --- placement ------------------------------------------------------------------------------------


class PlacedCopySerializer(serializers.Serializer):
    """One present copy: where it is, its state and verification, and the tiers its bytes sit in."""

    id = AsciiIntegerField(source="copy.pk")
    location_id = AsciiIntegerField(source="copy.location_id")
    location = serializers.CharField(source="location.name")
    location_tier = serializers.CharField(source="location.tier")
    host = serializers.CharField(source="host_name", help_text="Empty: a location of no host (a bucket).")
    site = serializers.CharField()
    region = serializers.CharField()
    failure_domain = serializers.CharField(source="domain")
    state = serializers.CharField(source="copy.state")
    verification = serializers.CharField(source="copy.verification")
    temporary = serializers.BooleanField(source="copy.temporary")
    bytes = AsciiIntegerField(source="copy.bytes")
    files = AsciiIntegerField(source="copy.file_count")
    tiers = TierShareSerializer(many=True, help_text="Bytes per tier and storage class (from the rollups).")


class PlacementColumnSerializer(serializers.Serializer):
    location_id = AsciiIntegerField(source="location.pk")
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
    checkpoint_id = AsciiIntegerField(source="checkpoint.pk")
    step = AsciiIntegerField(source="checkpoint.step", allow_null=True)
    tag = serializers.CharField(source="checkpoint.tag")
    importance = serializers.CharField(source="checkpoint.importance")
    verified_copies = serializers.SerializerMethodField()
    failure_domains = serializers.ListField(source="domains", child=serializers.CharField())
    flags = serializers.ListField(child=serializers.CharField())
    copies = PlacedCopySerializer(many=True)

    @extend_schema_field(AsciiIntegerField())
    def get_verified_copies(self, row) -> int:
        return len(row.verified)


class FlagCountSerializer(serializers.Serializer):
    flag = serializers.CharField()
    label = serializers.CharField()
    help = serializers.CharField()
    count = AsciiIntegerField()


class RunPlacementSerializer(serializers.Serializer):
    """A page of a run's checkpoints against the locations holding its copies, and the run's flags."""

    columns = PlacementColumnSerializer(many=True)
    rows = PlacementRowSerializer(many=True)
    flags = FlagCountSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="The URL of the next page; null on the last.")


class CheckpointPlacementSerializer(serializers.Serializer):
    checkpoint_id = AsciiIntegerField()
    verified_copies = AsciiIntegerField()
    failure_domains = serializers.ListField(child=serializers.CharField())
    flags = FlagCountSerializer(many=True, help_text="The flags this checkpoint raises (count is 1).")
    copies = PlacedCopySerializer(many=True)


class FlaggedCheckpointSerializer(serializers.Serializer):
    id = AsciiIntegerField(source="checkpoint.pk")
    run_id = AsciiIntegerField(source="checkpoint.run_id")
    run = serializers.SerializerMethodField()
    step = AsciiIntegerField(source="checkpoint.step", allow_null=True)
    tag = serializers.CharField(source="checkpoint.tag")
    importance = serializers.CharField(source="checkpoint.importance")
    flag = serializers.CharField()
    why = serializers.CharField()

    @extend_schema_field(serializers.CharField())
    def get_run(self, item) -> str:
        run = item["checkpoint"].run
        return f"{run.team.name}/{run.name}"


class FlaggedPageSerializer(serializers.Serializer):
    """One cursor page of the checkpoints raising a flag (``GET /api/v1/checkpoints/flagged/?flag=...``)."""

    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null on the first.")
    results = FlaggedCheckpointSerializer(many=True)
