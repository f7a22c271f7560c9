from django.apps import AppConfig


class SpendConfig(AppConfig):
    """What storage costs: the price book's rollups per day and month, the spend tables and pages, and placement
    (which copies sit on the wrong tier). It keeps its rollups in step with catalog's verdicts through
    ``catalog.hooks``, registered here, so catalog never imports it."""

    name = "spend"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ready() runs once the app registry is loaded: spend's modules import models.
        from catalog import hooks
        from spend import usage

        hooks.on_copies_restated(usage.copies_restated)
        hooks.on_location_rejudged(usage.location_rejudged)
        hooks.on_run_status_changed(usage.run_status_changed)
