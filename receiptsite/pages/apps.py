from __future__ import annotations

from django.apps import AppConfig


class PagesConfig(AppConfig):
    """The pages people read: an app for its template tags."""

    name = "receiptsite.pages"
    label = "pages"
    verbose_name = "Pages"
