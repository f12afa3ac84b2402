"""The OpenAPI 3.1 description of every API route, served at /api/openapi.json."""

from __future__ import annotations

from typing import Any

from receiptsite.evidence import declaration as evidence
from receiptsite.evidence.kinds import NO_NUL, Enum
from receiptsite.withdrawal import withdrawals as withdrawal

STRING = {"type": "string"}
UUID = {"type": "string", "format": "uuid"}
TIMESTAMP = {"type": "string", "format": "date-time"}


def _filter_schema(column: evidence.StoredColumn) -> dict[str, Any]:
    if isinstance(column.kind, Enum):
        return column.kind.schema()
    # No maxLength: a longer value is a filter that matches nothing, not a bad request.
    return {"type": "string", "pattern": NO_NUL}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": _ref("Problem")}},
    }


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ID_PARAM = {"name": "receipt_id", "in": "path", "required": True, "schema": UUID}
AUTH_ERRORS = {"401": _problem("Missing, unknown or revoked API key")}
# A POST under the idempotency key of a withdrawn receipt (problems.withdrawn_key).
WITHDRAWN_KEY = _problem(
    "The idempotency key is that of a receipt the tenant withdrew: nothing is stored; `id` and "
    "`url` name the withdrawn receipt"
)
BODY_ERRORS = {
    "400": _problem("The body is not UTF-8 JSON, or has duplicate keys"),
    "413": _problem("The body is over the size limit"),
    "415": _problem("The content type is not application/json (UTF-8)"),
    "422": _problem("The document is not valid, or the idempotency key names another receipt"),
    "429": _problem("Too many requests"),
}
RECEIPT_IN: dict[str, Any] = evidence.json_schema()

INGEST_ANSWER = {
    "type": "object",
    "required": ["id", "url", "verify_url", "output_hash", "recorded_at", "log_index"],
    "properties": {
        "id": UUID,
        "url": STRING,
        "verify_url": STRING,
        "output_hash": STRING,
        "recorded_at": TIMESTAMP,
        "log_index": {"type": ["integer", "null"]},
    },
}

SUMMARY = {
    "type": "object",
    "description": "A withdrawn receipt's summary has `withdrawn_at`, null for the fields read "
    "from its erased document, and no `document`. A receipt whose stored bytes are no JSON "
    'object any more (changed behind the site\'s back) has `"status": "invalid"`, null for '
    "`subject` and a null `document`; its verification says why.",
    "properties": {
        **INGEST_ANSWER["properties"],  # type: ignore[dict-item]
        "workflow_id": {"type": ["string", "null"]},
        "phase": {"type": ["string", "null"]},
        "subject": {"type": ["object", "null"]},
        "outcome": {"type": ["string", "null"]},
        "withdrawn_at": TIMESTAMP,
        "status": {"const": "invalid"},
    },
}

WITHDRAWAL_IN: dict[str, Any] = withdrawal.BODY.schema()
WITHDRAWAL_ANSWER = {
    "type": "object",
    "required": ["id", "withdrawn_at", "reason"],
    "properties": {
        "id": UUID,
        "withdrawn_at": TIMESTAMP,
        "reason": {"enum": list(withdrawal.REASONS)},
    },
}

WITHDRAWN = {
    "type": "object",
    "description": "The 410 answer of a withdrawn receipt's verification: the kept leaf hash "
    "and the log object, whose inclusion proof verifies against the current checkpoint.",
    "required": ["receipt_id", "status", "withdrawn_at", "reason", "leaf_hash", "log"],
    "properties": {
        "receipt_id": UUID,
        "status": {"const": "withdrawn"},
        "withdrawn_at": TIMESTAMP,
        "reason": {"enum": list(withdrawal.REASONS)},
        "leaf_hash": {"type": ["string", "null"], "contentEncoding": "base64"},
        "log": {"type": ["object", "null"]},
    },
}

CHECK = {
    "type": "object",
    "properties": {
        "name": STRING,
        "result": {"enum": ["pass", "fail", "pending"]},
        "detail": STRING,
    },
}

VERIFICATION = {
    "type": "object",
    "properties": {
        "receipt_id": UUID,
        "receipt_url": STRING,
        "status": {"enum": ["valid", "invalid", "pending"]},
        "algorithm": {"const": "sha-256"},
        "canonicalization": {"const": "RFC 8785"},
        "output_hash": STRING,
        "canonical_bytes": {"type": "string", "contentEncoding": "base64"},
        "byte_length": {"type": "integer"},
        "checks": {"type": "array", "items": CHECK},
        "signature": {"type": "object"},
        "log": {"type": ["object", "null"]},
        "assurance": {
            "type": "array",
            "description": "Who vouches for each claim the record makes "
            "(docs/verification.md, 'Who vouches for what')",
            "items": {
                "type": "object",
                "properties": {
                    "claim": STRING,
                    "basis": {"enum": ["checkable", "publisher", "site", "not_recorded"]},
                    "fields": {"type": "array", "items": STRING},
                    "evidence": {"type": "array", "items": STRING},
                    "checks": {"type": "array", "items": STRING},
                    "result": {"enum": ["pass", "fail", "pending", None]},
                    "detail": STRING,
                },
            },
        },
        "verified_at": TIMESTAMP,
    },
}

def _or_empty(schema: dict[str, Any]) -> dict[str, Any]:
    # An empty query parameter counts as absent.
    return {"anyOf": [schema, {"const": ""}]}


LIST_PARAMS = [
    {"name": name, "in": "query", "required": False, "schema": _or_empty(schema)}
    for name, schema in [
        *((column.name, _filter_schema(column)) for column in evidence.LIST_FILTERS),
        ("since", TIMESTAMP),
        ("until", TIMESTAMP),
        ("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
        ("cursor", STRING),
    ]
]

AUDIT_FILTERS: list[tuple[str, dict[str, Any]]] = [
        ("request_id", {"type": "string", "pattern": NO_NUL}),
        ("key_prefix", {"type": "string", "pattern": NO_NUL}),
        ("status", {"type": "integer", "minimum": 100, "maximum": 599}),
        ("receipt_id", UUID),
        ("since", TIMESTAMP),
        ("until", TIMESTAMP),
        ("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
        ("cursor", STRING),
]
AUDIT_PARAMS = [
    {"name": name, "in": "query", "required": False, "schema": _or_empty(schema)}
    for name, schema in AUDIT_FILTERS
]

AUDIT_ENTRY = {
    "type": "object",
    "required": ["id", "at", "request_id", "key_prefix", "method", "route", "status",
                 "problem_type", "receipt_ids", "duration_ms"],
    "properties": {
        "id": {"type": "integer"},
        "at": TIMESTAMP,
        "request_id": STRING,
        "key_prefix": STRING,
        "method": STRING,
        "route": {"type": "string", "description": "The route's pattern, e.g. "
                  "`GET /api/receipts/{id}`; never a path holding a receipt id."},
        "status": {"type": "integer"},
        "problem_type": {"type": ["string", "null"]},
        "receipt_ids": {"type": "array", "items": UUID},
        "duration_ms": {"type": "integer", "minimum": 0},
    },
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "receiptsite",
        "version": "receipt/v1",
        "description": "Execution receipts for AI agents: publish, read and verify.",
    },
    "components": {
        "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Problem": {
                "type": "object",
                "required": ["type", "title", "status", "detail"],
                "properties": {
                    "type": STRING,
                    "title": STRING,
                    "status": {"type": "integer"},
                    "detail": STRING,
                    "errors": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"field": STRING, "message": STRING},
                        },
                    },
                    "id": {**UUID, "description": "The receipt an `idempotency-key-reused` "
                           "or `withdrawn` problem names"},
                    "url": STRING,
                },
            },
            "ReceiptIn": RECEIPT_IN,
            "IngestAnswer": INGEST_ANSWER,
            "Summary": SUMMARY,
            "Verification": VERIFICATION,
            "WithdrawalIn": WITHDRAWAL_IN,
            "WithdrawalAnswer": WITHDRAWAL_ANSWER,
            "Withdrawn": WITHDRAWN,
            "AuditEntry": AUDIT_ENTRY,
        },
    },
    "paths": {
        "/api/receipts": {
            "post": {
                "summary": "Store one receipt",
                "operationId": "createReceipt",
                "security": [{"apiKey": []}],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ReceiptIn")}},
                },
                "responses": {
                    "201": _json("Stored, or replayed (Idempotent-Replayed: true)",
                                 _ref("IngestAnswer")),
                    **AUTH_ERRORS,
                    **BODY_ERRORS,
                    "410": WITHDRAWN_KEY,
                },
            },
            "get": {
                "summary": "List the tenant's receipts, newest first",
                "operationId": "listReceipts",
                "security": [{"apiKey": []}],
                "parameters": LIST_PARAMS,
                "responses": {
                    "200": _json(
                        "A page of summaries",
                        {
                            "type": "object",
                            "properties": {
                                "receipts": {"type": "array", "items": _ref("Summary")},
                                "next_cursor": {"type": ["string", "null"]},
                            },
                        },
                    ),
                    "400": _problem("A query parameter is not valid"),
                    **AUTH_ERRORS,
                },
            },
        },
        "/api/receipts/batch": {
            "post": {
                "summary": "Store 1 to 500 receipts, each as if posted alone",
                "operationId": "createReceiptBatch",
                "security": [{"apiKey": []}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["receipts"],
                                "properties": {
                                    "receipts": {
                                        "type": "array",
                                        "minItems": 1,
                                        "maxItems": 500,
                                        # Each item is meant to be a ReceiptIn, but one that
                                        # is not gets its own problem in the 200 answer: the
                                        # batch itself stays valid.
                                        "items": {
                                            "description": "A receipt document (ReceiptIn);"
                                            " an invalid one is answered in its own result.",
                                        },
                                    }
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": _json(
                        "One result per item, in order: a stored or replayed item's answer "
                        "with `status` 201 and `replayed`, or a refused item's problem with "
                        "its own `status` (422; 413 for an item over the size limit; 410 "
                        "`withdrawn` for an item under a withdrawn receipt's key, which stores "
                        "nothing)",
                        {"type": "object", "properties": {"results": {"type": "array"}}},
                    ),
                    **AUTH_ERRORS,
                    **BODY_ERRORS,
                },
            },
        },
        "/api/receipts/{receipt_id}": {
            "get": {
                "summary": "One of the tenant's receipts, with its document",
                "operationId": "getReceipt",
                "security": [{"apiKey": []}],
                "parameters": [ID_PARAM],
                "responses": {
                    "200": _json("The summary and the document", _ref("Summary")),
                    "404": _problem("No receipt of this tenant has this id"),
                    **AUTH_ERRORS,
                },
            }
        },
        "/api/receipts/{receipt_id}/withdrawal": {
            "post": {
                "summary": "Withdraw one of the tenant's receipts: its content is erased, its "
                "place in the log kept",
                "operationId": "withdrawReceipt",
                "security": [{"apiKey": []}],
                "parameters": [ID_PARAM],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("WithdrawalIn")}},
                },
                "responses": {
                    "201": _json("Withdrawn, or the first withdrawal replayed "
                                 "(Idempotent-Replayed: true)", _ref("WithdrawalAnswer")),
                    "404": _problem("No receipt of this tenant has this id"),
                    **AUTH_ERRORS,
                    **BODY_ERRORS,
                    "422": _problem("The withdrawal body is not valid"),
                },
            }
        },
        "/api/audit-logs": {
            "get": {
                "summary": "The tenant's API audit log, newest first",
                "operationId": "listAuditLog",
                "security": [{"apiKey": []}],
                "parameters": AUDIT_PARAMS,
                "responses": {
                    "200": _json(
                        "A page of entries",
                        {
                            "type": "object",
                            "required": ["entries", "next_cursor"],
                            "properties": {
                                "entries": {"type": "array", "items": _ref("AuditEntry")},
                                "next_cursor": {"type": ["string", "null"]},
                            },
                        },
                    ),
                    "400": _problem("A query parameter is not valid"),
                    "429": _problem("Too many requests"),
                    **AUTH_ERRORS,
                },
            }
        },
        "/api/receipt/{receipt_id}/verify": {
            "get": {
                "summary": "The verification JSON, every check recomputed now",
                "operationId": "verifyReceipt",
                "parameters": [ID_PARAM],
                "responses": {
                    "200": _json("The verification", _ref("Verification")),
                    "404": _problem("No receipt has this id"),
                    "410": _json("The receipt was withdrawn", _ref("Withdrawn")),
                },
            }
        },
        "/.well-known/receipt-keys.json": {
            "get": {
                "summary": "The site's public signing keys, log verifier keys and keys' history",
                "operationId": "getKeys",
                "responses": {"200": _json("The keys", {"type": "object"})},
            }
        },
        "/api/log/checkpoint": {
            "get": {
                "summary": "The latest signed checkpoint (C2SP signed note)",
                "operationId": "getCheckpoint",
                "responses": {
                    "200": {
                        "description": "The checkpoint",
                        "content": {"text/plain": {"schema": STRING}},
                    },
                    "503": _problem("The site refuses to sign its log"),
                },
            }
        },
        "/api/log/witnessed-checkpoint": {
            "get": {
                "summary": "The largest checkpoint that meets the witness policy's quorum, with "
                "the witnesses' cosignature lines (c2sp.org/tlog-cosignature)",
                "operationId": "getWitnessedCheckpoint",
                "responses": {
                    "200": {
                        "description": "The checkpoint, with its cosignatures",
                        "content": {"text/plain": {"schema": STRING}},
                    },
                    "404": _problem("No checkpoint is witnessed yet (or there is no policy)"),
                },
            }
        },
        "/api/log/consistency": {
            "get": {
                "summary": "A consistency proof between two tree sizes (RFC 9162 2.1.4)",
                "operationId": "getConsistency",
                "parameters": [
                    {"name": "first", "in": "query", "required": True,
                     "schema": {"type": "integer", "minimum": 1}},
                    {"name": "second", "in": "query", "required": True,
                     "schema": {"type": "integer", "minimum": 1}},
                ],
                "responses": {
                    "200": _json(
                        "The proof",
                        {
                            "type": "object",
                            "properties": {
                                "first": {"type": "integer"},
                                "second": {"type": "integer"},
                                "proof": {"type": "array", "items": STRING},
                            },
                        },
                    ),
                    "400": _problem("Sizes out of range"),
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Whether the site can serve everything (the database answers, its "
                "key may sign, the log is sound), and why not; answered whatever the Host",
                "operationId": "health",
                "responses": {
                    "200": _json("Healthy", {"type": "object"}),
                    "503": _problem("Unhealthy"),
                },
            }
        },
        "/api/openapi.json": {
            "get": {
                "summary": "This description",
                "operationId": "openapi",
                "responses": {"200": _json("OpenAPI 3.1", {"type": "object"})},
            }
        },
    },
}
