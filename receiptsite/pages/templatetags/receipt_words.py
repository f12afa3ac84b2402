"""`{{ value|when }}`: a time as every page writes it (presentation.when_html: the page's
language, UTC, in a <time> element to which receipt.js adds the reader's own time);
`{% colon %}`: the colon after a label, as the page's language writes it (": ", "：")."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString
from django.utils.translation import pgettext

from receiptsite.pages.presentation import when_html, when_text

register = template.Library()


@register.filter
def when(value: datetime | str | None) -> SafeString | str:
    return "" if value in (None, "") else when_html(value)  # type: ignore[arg-type]


@register.filter
def when_plain(value: datetime | str | None) -> str:
    """The same words, with no element (in a sentence, or for a time of the past)."""
    return "" if value in (None, "") else when_text(value)  # type: ignore[arg-type]


@register.simple_tag
def colon() -> SafeString:
    return conditional_escape(pgettext("after a label", ": "))
