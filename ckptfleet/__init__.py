"""Project package: settings, URLs, the Celery app and WSGI."""

from ckptfleet.celery import app as celery_app

__all__ = ["celery_app"]
