from __future__ import annotations

from django.apps import AppConfig


class ReviewConfig(AppConfig):
    """The auditors' review decisions and their signed record: an app for its admin and its
    command (checkdecisions); the decisions are models of the receipts app."""

    name = "receiptsite.review"
    label = "review"
    verbose_name = "Review"
