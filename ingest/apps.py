from django.apps import AppConfig


class IngestConfig(AppConfig):
    """The pipelines that feed the catalog: host inventories (``ingest.inventory``) and bucket scans
    (``ingest.scan``), their Celery tasks, and the commands that add hosts and buckets to watch."""

    name = "ingest"
    default_auto_field = "django.db.models.BigAutoField"
