from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit.anchors import register_store
        from audit.choices import AnchorTarget
        from fleet.api import schema  # noqa: F401 - registers the host token scheme with drf-spectacular
        from fleet.audit_anchors import s3_anchor_store

        # The audit trail's anchors in an Object Lock bucket: audit, the floor below, cannot import the S3 client.
        register_store(AnchorTarget.S3, s3_anchor_store)

        from approvals.registry import ChangeKind, register
        from fleet.services import SOFT_DELETE_KIND, apply_soft_delete_change, describe_soft_delete_change

        # A person's shortening of a location's recovery window waits for a second person (approvals).
        register(
            ChangeKind(
                name=SOFT_DELETE_KIND,
                target_type="location",
                label="Shorten a location's recovery window",
                apply=apply_soft_delete_change,
                describe=describe_soft_delete_change,
            )
        )
