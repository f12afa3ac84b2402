"""WSGI entry point: `gunicorn receiptsite.wsgi` (with the repository's gunicorn.conf.py)."""

from __future__ import annotations

import os
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

from receiptsite.config import stop_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")

try:
    application = get_wsgi_application()
except ImproperlyConfigured as error:
    # One line, not a traceback per worker. gunicorn.conf.py checks the configuration in the
    # master before any worker starts; this covers a start without it. Exit status 3 is
    # gunicorn's "worker failed to boot", on which its master stops rather than retrying.
    print(stop_line(error), file=sys.stderr, flush=True)
    raise SystemExit(3) from None
