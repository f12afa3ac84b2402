"""WSGI entry point: `gunicorn receiptsite.wsgi` (with the repository's gunicorn.conf.py)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receiptsite.settings")

application = get_wsgi_application()
