"""One helper makes every error answer: RFC 9457 problem+json."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import JsonResponse


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JsonResponse:
    body = {
        "type": f"{settings.SITE_URL}/problems/{slug}",
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    response = JsonResponse(
        body, status=status, content_type="application/problem+json", json_dumps_params={
            "ensure_ascii": False
        }
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="receipts"'
    return response
