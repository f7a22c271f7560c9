"""WSGI entry point for gunicorn."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
application = get_wsgi_application()

from ckptfleet.heap import settle  # noqa: E402  (needs the settings loaded above)

settle()
