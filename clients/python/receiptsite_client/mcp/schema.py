"""The schemas receipt-mcp shows an agent, read from the site it publishes to: the receipt/v1
document (the body `POST /api/receipts` takes) and the query parameters of
`GET /api/receipts`, both from the site's `/api/openapi.json`. The site's declaration is their
one source: nothing of receipt/v1 is typed again here.

The OpenAPI description names shared schemas by `$ref` into `components`; an MCP tool's
input schema must stand alone, so each component it uses is copied into its `$defs`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

from receiptsite_client import transport

OPENAPI_PATH: Final = "/api/openapi.json"
RECEIPTS_PATH: Final = "/api/receipts"
COMPONENTS: Final = "#/components/schemas/"


class SchemaUnavailable(Exception):
    """The site's schemas could not be had; the message says why, in a few words."""


@dataclass(frozen=True)
class SiteSchemas:
    """What the site's OpenAPI description says of its receipts routes."""

    source: str  # the URL they were read from
    receipt: dict[str, Any]  # the receipt/v1 document's JSON Schema, standing alone
    list_parameters: dict[str, dict[str, Any]]  # GET /api/receipts: name -> schema


def from_openapi(openapi: Any, source: str) -> SiteSchemas:
    """The receipts schemas in an OpenAPI 3.1 description; SchemaUnavailable when it does not
    hold them where the site puts them."""
    try:
        route = openapi["paths"][RECEIPTS_PATH]
        body = route["post"]["requestBody"]["content"]["application/json"]["schema"]
        parameters = route["get"].get("parameters", [])
        components = openapi.get("components", {}).get("schemas", {})
    except (KeyError, TypeError, AttributeError):
        raise SchemaUnavailable(
            f"{source} does not describe POST and GET {RECEIPTS_PATH}"
        ) from None
    if not isinstance(components, dict) or not isinstance(parameters, list):
        raise SchemaUnavailable(f"{source} is not an OpenAPI description of the receipts routes")
    receipt = standalone(body, components)
    listing: dict[str, dict[str, Any]] = {}
    for parameter in parameters:
        if isinstance(parameter, dict) and parameter.get("in") == "query":
            schema = parameter.get("schema")
            if isinstance(parameter.get("name"), str) and isinstance(schema, dict):
                listing[parameter["name"]] = without_empty(standalone(schema, components))
    return SiteSchemas(source, receipt, listing)


def standalone(schema: Any, components: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each component it refers to (at any depth, and the components' own
    references) copied into `$defs`; a schema that is itself a reference is that component.
    SchemaUnavailable for a reference to a component that is not there, or to anything else."""
    root = schema
    if isinstance(schema, dict) and set(schema) == {"$ref"}:
        root = components.get(_component(schema["$ref"]))
        if not isinstance(root, dict):
            raise SchemaUnavailable(f"no component {schema['$ref']}")
    if not isinstance(root, dict):
        raise SchemaUnavailable("a schema that is not a JSON object")
    defs: dict[str, Any] = {}
    out = _rewrite(copy.deepcopy(root), components, defs)
    if defs:
        out["$defs"] = {**out.get("$defs", {}), **defs}
    return out


def without_empty(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema without its `{"const": ""}` alternative: the site counts an
    empty parameter as absent, and a tool argument is absent by being left out."""
    alternatives = schema.get("anyOf")
    if not isinstance(alternatives, list):
        return schema
    kept = [a for a in alternatives if a != {"const": ""}]
    if len(kept) == len(alternatives):
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    if len(kept) == 1 and isinstance(kept[0], dict):
        return {**rest, **kept[0]}
    return {**rest, "anyOf": kept}


def fetch(site_url: str, *, timeout: float, user_agent: str) -> SiteSchemas:
    """The site's receipts schemas, from its OpenAPI description (a public route: no key is
    sent); SchemaUnavailable saying why not."""
    url = site_url.rstrip("/") + OPENAPI_PATH
    answer = transport.request(
        "GET", url, api_key=None, body=None, timeout=timeout, user_agent=user_agent
    )
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise SchemaUnavailable(f"GET {url}: {answer.describe()}")
    return from_openapi(answer.body, url)


def _component(ref: Any) -> str:
    if not isinstance(ref, str) or not ref.startswith(COMPONENTS):
        raise SchemaUnavailable(f"a reference outside {COMPONENTS}: {ref!r}")
    return ref[len(COMPONENTS) :]


def _rewrite(node: Any, components: dict[str, Any], defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_rewrite(item, components, defs) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = value  # the schema's own definitions, copied with it
        elif key == "$ref":
            name = _component(value)
            if name not in defs:
                found = components.get(name)
                if not isinstance(found, dict):
                    raise SchemaUnavailable(f"no component {value}")
                defs[name] = {}  # taken before it is filled: a component may refer to itself
                defs[name] = _rewrite(copy.deepcopy(found), components, defs)
            out[key] = f"#/$defs/{name}"
        else:
            out[key] = _rewrite(value, components, defs)
    return out
