#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

A setting that is missing or malformed (``ckptfleet.env`` raises ``ImproperlyConfigured`` naming the variable)
is one line on stderr and exit status 2, not a traceback: the commands the docs show (README.md, docs/) are
pasted into fresh shells, where a missing ``DJANGO_SECRET_KEY`` or ``CKPTFLEET_DEBUG`` is the usual first mistake.
``--traceback`` still shows where it was raised.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        if "--traceback" in sys.argv:
            raise
        sys.stderr.write(f"manage.py: not configured: {exc} (docs/admin/configuration.md)\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
