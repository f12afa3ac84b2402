from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "receiptsite.audit"
    label = "audit"
    verbose_name = "API audit log"
