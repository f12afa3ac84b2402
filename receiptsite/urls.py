from __future__ import annotations

from django.contrib import admin
from django.urls import path, register_converter
from django.views.i18n import JavaScriptCatalog

from receiptsite.api import otlp
from receiptsite.api import views as api
from receiptsite.audit import views as audit_views
from receiptsite.capability import ReceiptIdConverter
from receiptsite.ledger import tiles
from receiptsite.metrics import exposition as metrics
from receiptsite.pages import views

register_converter(ReceiptIdConverter, "receipt_id")
register_converter(tiles.LevelConverter, "tile_level")
register_converter(tiles.IndexConverter, "tile_index")
register_converter(tiles.WidthConverter, "tile_width")

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("run/<receipt_id:receipt_id>", views.receipt_page, name="receipt-page"),
    path("run/<receipt_id:receipt_id>/decisions", views.receipt_decision, name="receipt-decision"),
    path("run/<receipt_id:receipt_id>/handoff.txt", views.handoff_txt, name="receipt-handoff"),
    path("run/<receipt_id:receipt_id>/bundle.json", views.receipt_bundle, name="receipt-bundle"),
    path("api/receipts", api.receipts, name="api-receipts"),
    path("api/receipts/batch", api.receipts_batch, name="api-receipts-batch"),
    path("api/receipts/<receipt_id:receipt_id>", api.receipt_detail, name="api-receipt-detail"),
    path("api/receipts/<receipt_id:receipt_id>/withdrawal", api.receipt_withdrawal,
         name="api-receipt-withdrawal"),
    path("api/audit-logs", audit_views.audit_logs, name="api-audit-logs"),
    path("api/receipt/<receipt_id:receipt_id>/verify", api.receipt_verification, name="api-verify"),
    path(".well-known/receipt-keys.json", api.keys_document, name="receipt-keys"),
    path("api/log/checkpoint", api.checkpoint, name="log-checkpoint"),
    path("api/log/consistency", api.consistency, name="log-consistency"),
    path("api/log/witnessed-checkpoint", api.witnessed_checkpoint,
         name="log-witnessed-checkpoint"),
    # The static read API of c2sp.org/tlog-tiles: the checkpoint and the hash tiles.
    path("log/checkpoint", api.tiles_checkpoint, name="tiles-checkpoint"),
    path("log/tile/<tile_level:level>/<tile_index:index>", api.tile, name="tile"),
    path("log/tile/<tile_level:level>/<tile_index:index>.p/<tile_width:width>", api.tile,
         name="tile-partial"),
    path("api/openapi.json", api.openapi, name="openapi"),
    path("healthz", api.healthz, name="healthz"),
    # Prometheus' scrape: for METRICS_ALLOWED_FROM, asking directly; anyone else, the 404.
    path("metrics", metrics.metrics, name="metrics"),
    path("v1/traces", otlp.traces, name="otlp-traces"),
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["receiptsite.pages"]),
         name="javascript-catalog"),
    path("admin/", admin.site.urls),
]

handler400 = "receiptsite.pages.views.bad_request"
handler403 = "receiptsite.pages.views.permission_denied"
handler404 = "receiptsite.pages.views.not_found"
handler500 = "receiptsite.pages.views.server_error"
