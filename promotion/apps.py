from django.apps import AppConfig


class PromotionConfig(AppConfig):
    name = "promotion"
    verbose_name = "Promotion: restores and copies to hotter tiers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The ingest asks which copies the product wrote (catalog never imports promotion).
        from catalog import hooks
        from promotion.provenance import copies_written

        hooks.on_provenance_asked(copies_written)
