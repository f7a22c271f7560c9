from django.apps import AppConfig


class PromotionConfig(AppConfig):
    name = "promotion"
    verbose_name = "Promotion: restores and copies to hotter tiers"
    default_auto_field = "django.db.models.BigAutoField"
