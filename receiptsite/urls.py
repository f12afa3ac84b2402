from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.i18n import JavaScriptCatalog

from receiptsite.receipts import api, views

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("run/<str:receipt_id>", views.receipt_page, name="receipt-page"),
    path("run/<str:receipt_id>/decisions", views.receipt_decision, name="receipt-decision"),
    path("run/<str:receipt_id>/handoff.txt", views.handoff_text, name="receipt-handoff"),
    path("api/receipts", api.receipts, name="api-receipts"),
    path("api/receipts/batch", api.receipts_batch, name="api-receipts-batch"),
    path("api/receipts/<str:receipt_id>", api.receipt_detail, name="api-receipt-detail"),
    path("api/receipt/<str:receipt_id>/verify", api.verify, name="api-verify"),
    path(".well-known/receipt-keys.json", api.keys, name="receipt-keys"),
    path("api/log/checkpoint", api.checkpoint, name="log-checkpoint"),
    path("api/log/consistency", api.consistency, name="log-consistency"),
    path("api/openapi.json", api.openapi, name="openapi"),
    path("healthz", api.healthz, name="healthz"),
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["receiptsite.receipts"]),
         name="javascript-catalog"),
    path("admin/", admin.site.urls),
]

handler400 = "receiptsite.receipts.views.bad_request"
handler403 = "receiptsite.receipts.views.permission_denied"
handler404 = "receiptsite.receipts.views.not_found"
handler500 = "receiptsite.receipts.views.server_error"
