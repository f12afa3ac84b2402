"""receipt-mcp with no site: the configuration that stops it at start, the site's schemas read
from an OpenAPI description, each tool's answers and problem objects against a loopback server
of the test's own, and the installed command spoken to through the official SDK's stdio client
with no site at all (publishing into the outbox, the other tools saying the site cannot be
reached). Against a live site: test_mcp_live.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from client_helpers import NO_SITE, ScriptedServer, created, document, problem
from mcp_helpers import TOOLS, UNREACHABLE, VARIABLES, mcp_session, run_mcp
from receiptsite_client import Client
from receiptsite_client.mcp.config import ConfigError, read_config
from receiptsite_client.mcp.schema import SchemaUnavailable, from_openapi, standalone
from receiptsite_client.mcp.tools import PROBLEM_TYPE, Tools, receipt_id_of
from vector_helpers import VECTORS
from vector_helpers import run as run_verify

pytestmark = [pytest.mark.unit, pytest.mark.anyio]

OPENAI_KEY = "sk-proj-4f9Qa81Lm2Zx7Rt0Yb3Kc6Wd"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def configured(outbox: Path, **changes: str) -> dict[str, str]:
    env = {
        "RECEIPTSITE_URL": NO_SITE,
        "RECEIPTSITE_API_KEY": "rk_000000000000_unit",
        "RECEIPTSITE_OUTBOX": str(outbox),
    }
    env.update(changes)
    return {k: v for k, v in env.items() if v != "<unset>"}


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("variable", VARIABLES)
@pytest.mark.parametrize("value", ["<unset>", "", "  "])
def test_a_missing_variable_stops_the_server_with_one_line_naming_it(
    outbox_path: Path, variable: str, value: str
) -> None:
    done = run_mcp(configured(outbox_path, **{variable: value}))
    assert done.returncode == 2
    assert done.stdout == ""  # stdout is the protocol's: nothing else is ever written there
    [line] = done.stderr.splitlines()
    assert line.startswith("receipt-mcp: set ") and variable in line
    assert [name for name in VARIABLES if name in line] == [variable]
    assert not outbox_path.exists()


def test_every_missing_variable_is_named_in_the_one_line() -> None:
    done = run_mcp({})
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert all(name in line for name in VARIABLES), line


def test_a_site_that_is_no_http_url_or_an_outbox_that_cannot_be_made_stops_it_too(
    tmp_path: Path, outbox_path: Path
) -> None:
    bad_url = run_mcp(configured(outbox_path, RECEIPTSITE_URL="receipts.example.org"))
    assert bad_url.returncode == 2 and bad_url.stdout == ""
    assert bad_url.stderr.splitlines() == [
        "receipt-mcp: RECEIPTSITE_URL must be an http(s) URL, not 'receipts.example.org'"
    ]
    (tmp_path / "a-file").write_text("")
    under_a_file = tmp_path / "a-file" / "receipts.sqlite3"
    bad_outbox = run_mcp(configured(outbox_path, RECEIPTSITE_OUTBOX=str(under_a_file)))
    assert bad_outbox.returncode == 2 and bad_outbox.stdout == ""
    [line] = bad_outbox.stderr.splitlines()
    assert line.startswith(f"receipt-mcp: RECEIPTSITE_OUTBOX: cannot open {under_a_file}")


def test_the_configuration_takes_the_home_folder_and_trims_the_site_url() -> None:
    config = read_config({
        "RECEIPTSITE_URL": "https://receipts.example.org/ ",
        "RECEIPTSITE_API_KEY": " rk_abc ",
        "RECEIPTSITE_OUTBOX": "~/receipts.sqlite3",
    })
    assert config.site_url == "https://receipts.example.org"
    assert config.api_key == "rk_abc"
    assert config.outbox == Path.home() / "receipts.sqlite3"
    with pytest.raises(ConfigError, match="RECEIPTSITE_API_KEY"):
        read_config({"RECEIPTSITE_URL": "https://x", "RECEIPTSITE_OUTBOX": "o"})


# --- the site's schemas --------------------------------------------------------------------------

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "components": {
        "schemas": {
            "ReceiptIn": {
                "type": "object",
                "required": ["workflow_id", "subject"],
                "properties": {
                    "workflow_id": {"type": "string", "minLength": 1},
                    "subject": {"$ref": "#/components/schemas/Subject"},
                    "links": {"type": "array", "items": {"$ref": "#/components/schemas/Link"}},
                },
            },
            "Subject": {"type": "object", "required": ["name"],
                        "properties": {"name": {"type": "string"}}},
            "Link": {
                "type": "object",
                "properties": {"id": {"type": "string"},
                               "children": {"type": "array",
                                            "items": {"$ref": "#/components/schemas/Link"}}},
            },
            "Unused": {"type": "integer"},
        }
    },
    "paths": {
        "/api/receipts": {
            "post": {"requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/ReceiptIn"}}}}},
            "get": {"parameters": [
                {"name": "phase", "in": "query",
                 "schema": {"anyOf": [{"enum": ["start", "end"]}, {"const": ""}]}},
                {"name": "limit", "in": "query",
                 "schema": {"anyOf": [{"type": "integer", "maximum": 200}, {"const": ""}]}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                {"name": "X-Other", "in": "header", "schema": {"type": "string"}},
            ]},
        }
    },
}


def test_the_receipt_schema_is_the_component_the_post_body_names_standing_alone() -> None:
    schemas = from_openapi(OPENAPI, "http://site/api/openapi.json")
    receipt = schemas.receipt
    assert receipt["required"] == ["workflow_id", "subject"]
    assert receipt["properties"]["subject"] == {"$ref": "#/$defs/Subject"}
    assert set(receipt["$defs"]) == {"Subject", "Link"}  # what it uses, and nothing else
    assert receipt["$defs"]["Link"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Link"
    }
    # It resolves on its own: a validator with nothing but this schema judges documents.
    validator = jsonschema.Draft202012Validator(receipt)
    good = {"workflow_id": "wf", "subject": {"name": "t"},
            "links": [{"id": "a", "children": [{"id": "b"}]}]}
    assert list(validator.iter_errors(good)) == []
    bad = {"workflow_id": "wf", "subject": {}, "links": [{"children": [{"id": 7}]}]}
    assert sorted(e.message for e in validator.iter_errors(bad)) == [
        "'name' is a required property", "7 is not of type 'string'"
    ]
    assert OPENAPI["components"]["schemas"]["ReceiptIn"]["properties"]["subject"] == {
        "$ref": "#/components/schemas/Subject"
    }  # the description itself is left as it was


def test_the_list_parameters_lose_the_empty_alternative_and_headers_are_not_parameters() -> None:
    schemas = from_openapi(OPENAPI, "http://site/api/openapi.json")
    assert schemas.list_parameters == {
        "phase": {"enum": ["start", "end"]},
        "limit": {"type": "integer", "maximum": 200},
        "cursor": {"type": "string"},
    }


@pytest.mark.parametrize(
    "openapi",
    [
        {},
        {"paths": {"/api/receipts": {"get": {}}}},
        [],
        {"paths": {"/api/receipts": {"post": {"requestBody": {"content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Missing"}}}}}, "get": {}}}},
        {"paths": {"/api/receipts": {"post": {"requestBody": {"content": {"application/json": {
            "schema": {"$ref": "https://elsewhere.example/schema.json"}}}}}, "get": {}}}},
    ],
)
def test_a_description_without_the_receipts_schemas_is_refused(openapi: Any) -> None:
    with pytest.raises(SchemaUnavailable):
        from_openapi(openapi, "http://site/api/openapi.json")


def test_a_reference_inside_to_a_missing_component_is_refused() -> None:
    with pytest.raises(SchemaUnavailable, match="no component"):
        standalone({"properties": {"a": {"$ref": "#/components/schemas/Nope"}}}, {})


# --- each tool, against a loopback server of the test's own ---------------------------------------


def test_get_takes_an_id_or_a_link_and_answers_the_sites_body_as_it_is(
    outbox_path: Path,
) -> None:
    receipt_id = str(uuid.uuid4())
    body = {"id": receipt_id, "document": {"workflow_id": "wf"}}
    ok = (200, {"Content-Type": "application/json"}, json.dumps(body).encode())
    with ScriptedServer(script=[ok, ok]) as server:
        tools = Tools(server.url, "rk_key", outbox_path)
        for given in (receipt_id, f"{server.url}/run/{receipt_id.upper()}/"):
            answer = tools.get_receipt(given)
            assert (answer.is_error, answer.body, answer.reached_site) == (False, body, True)
        assert [(s.method, s.path) for s in server.seen] == [
            ("GET", f"/api/receipts/{receipt_id}")
        ] * 2
        assert server.seen[0].headers["Authorization"] == "Bearer rk_key"
    assert receipt_id_of(" ../../x ") == "../../x"  # not a link: the site judges it (quoted)


def test_an_answer_that_is_no_problem_object_is_an_unexpected_answer(outbox_path: Path) -> None:
    html = (502, {"Content-Type": "text/html"}, b"<h1>Bad gateway</h1>")
    with ScriptedServer(script=[html]) as server:
        answer = Tools(server.url, "rk_key", outbox_path).get_receipt(str(uuid.uuid4()))
    assert answer.is_error and answer.reached_site
    assert answer.body["type"] == PROBLEM_TYPE + "unexpected-answer"
    assert answer.body["status"] == 502
    assert "502" in answer.body["detail"]


def test_list_sends_only_the_filters_given_encoded(outbox_path: Path) -> None:
    page: dict[str, Any] = {"receipts": [], "next_cursor": None}
    ok = (200, {"Content-Type": "application/json"}, json.dumps(page).encode())
    with ScriptedServer(script=[ok, ok]) as server:
        tools = Tools(server.url, "rk_key", outbox_path)
        assert tools.list_receipts().body == page
        answer = tools.list_receipts(
            workflow_id="wf 1&2", phase="end", since="2026-01-01T00:00:00+01:00", limit=2,
            outcome=None, session_id="", cursor="abc",
        )
        assert answer.body == page
        assert [s.path for s in server.seen] == [
            "/api/receipts",
            "/api/receipts?workflow_id=wf+1%262&phase=end&since=2026-01-01T00%3A00%3A00%2B01%3A00"
            "&limit=2&cursor=abc",
        ]
    refused = tools.list_receipts(colour="red")
    assert refused.is_error and refused.body["errors"] == [
        {"field": "/colour", "message": "is not a filter of list_receipts"}
    ]


def test_publish_answers_the_entry_and_a_refusal_as_the_sites_problem_with_the_entry(
    outbox_path: Path, workflow_id: str
) -> None:
    receipt_id = str(uuid.uuid4())
    refusal = problem(422, "validation-error", detail="1 field(s) are not valid: /phase",
                      errors=[{"field": "/phase", "message": "is required"}])
    with ScriptedServer(script=[created(receipt_id, "http://site"), refusal]) as server:
        tools = Tools(server.url, "rk_key", outbox_path)
        published = tools.publish_receipt(document(workflow_id))
        assert not published.is_error and published.reached_site
        assert published.body["receipt_status"] == "published"
        assert published.body["receipt_id"] == receipt_id
        assert published.body["url"] == f"http://site/run/{receipt_id}"
        assert "note" not in published.body
        refused = tools.publish_receipt(document(workflow_id, phase=None))
    assert refused.is_error
    body = refused.body
    entry = body.pop("entry")
    assert body == json.loads(refusal[2])  # the site's problem, as it answered it
    assert entry["receipt_status"] == "failed" and entry["publish_attempts"] == 1


def test_publish_refuses_what_is_no_document_a_reused_key_and_a_secret_identifier(
    outbox_path: Path, workflow_id: str
) -> None:
    with ScriptedServer(then=lambda seen: created(str(uuid.uuid4()))) as server:
        tools = Tools(server.url, "rk_key", outbox_path)
        listed = tools.publish_receipt(["not", "a", "document"])
        assert listed.is_error and listed.body["type"] == PROBLEM_TYPE + "invalid-arguments"
        assert listed.body["errors"][0]["field"] == "/document"

        keyed = document(workflow_id, idempotency_key=f"{workflow_id}/end/1")
        assert not tools.publish_receipt(keyed).is_error
        reused = tools.publish_receipt({**keyed, "result": "something else"})
        assert reused.is_error
        assert reused.body["type"] == PROBLEM_TYPE + "idempotency-key-reused"
        assert reused.body["errors"][0]["field"] == "/idempotency_key"

        posts = len(server.seen)
        secret = tools.publish_receipt(document(workflow_id, trace_id=OPENAI_KEY))
        assert len(server.seen) == posts  # never sent
    assert secret.is_error and secret.body["type"] == PROBLEM_TYPE + "not-sent"
    assert "/trace_id looks like a secret" in secret.body["detail"]
    assert OPENAI_KEY not in json.dumps(secret.body)
    assert secret.body["entry"]["receipt_status"] == "failed"


def test_flush_pending_says_whether_the_site_took_anything(
    outbox_path: Path, refused_url: str, workflow_id: str
) -> None:
    Client(refused_url, "rk_key", outbox_path, deadline=0.1).record(document(workflow_id))
    assert Tools(refused_url, "rk_key", outbox_path).flush_pending(0.3) is False
    with ScriptedServer(then=lambda seen: created(str(uuid.uuid4()))) as server:
        tools = Tools(server.url, "rk_key", outbox_path)
        assert tools.flush_pending() is True
        assert tools.flush_pending() is False  # nothing left
    [entry] = tools.client.entries(workflow_id)
    assert entry.receipt_status == "published"


@pytest.mark.parametrize(
    ("vector", "status"),
    [("valid/plain.json", "valid"), ("invalid/plain--proof-other-size.json", "invalid")],
)
def test_verify_answers_what_receipt_verify_json_prints(
    outbox_path: Path, vector: str, status: str
) -> None:
    target, keys = str(VECTORS / vector), str(VECTORS / "keys.json")
    answer = Tools(NO_SITE, "rk_key", outbox_path).verify_receipt(target, keys)
    assert not answer.is_error  # a verdict, even "invalid", is the tool doing its job
    cli = json.loads(run_verify(target, "--key", keys, "--json").stdout)
    assert {k: answer.body[k] for k in ("status", "checks")} == cli
    assert cli["status"] == status


def test_verify_a_saved_file_without_a_key_says_it_cannot_tell_who_signed_it(
    outbox_path: Path,
) -> None:
    answer = Tools(NO_SITE, "rk_key", outbox_path).verify_receipt(str(VECTORS / "valid/plain.json"))
    assert not answer.is_error
    assert answer.body["status"] == "could_not_check"
    assert any("cannot say who signed it" in note for note in answer.body["notes"])


def test_verify_what_cannot_be_loaded_is_a_tool_error(
    outbox_path: Path, tmp_path: Path, refused_url: str
) -> None:
    tools = Tools(refused_url, "rk_key", outbox_path)
    missing = tools.verify_receipt(str(tmp_path / "nowhere.json"))
    assert missing.is_error and missing.body["type"] == PROBLEM_TYPE + "could-not-check"
    assert missing.body["verification"]["status"] == "could_not_check"
    down = tools.verify_receipt(str(uuid.uuid4()))
    assert down.is_error and down.body["type"] == UNREACHABLE
    assert down.body["title"] == "The site cannot be reached"
    assert refused_url in down.body["detail"]


def test_handoff_of_a_workflow_the_outbox_does_not_hold_is_a_tool_error(
    outbox_path: Path,
) -> None:
    answer = Tools(NO_SITE, "rk_key", outbox_path).handoff("wf-never")
    assert answer.is_error and answer.body["type"] == PROBLEM_TYPE + "no-receipts"


# --- the installed command through the SDK's stdio client, with no site ---------------------------


async def test_with_no_site_the_server_starts_publishes_into_the_outbox_and_says_so(
    outbox_path: Path, tmp_path: Path, workflow_id: str
) -> None:
    stderr = tmp_path / "server.stderr"
    async with mcp_session(NO_SITE, "rk_000000000000_unit", outbox_path, stderr) as server:
        tools = await server.tools()
        assert list(tools) == TOOLS
        publish = tools["publish_receipt"]
        assert publish.inputSchema["required"] == ["document"]
        assert publish.inputSchema["properties"]["document"]["type"] == "object"
        assert publish.description is not None
        assert "could not be reached when the tools were listed" in publish.description
        assert f"{NO_SITE}/api/openapi.json" in publish.description
        for listed in tools.values():  # every argument says what it is
            assert listed.description and all(
                spec.get("description") for spec in listed.inputSchema["properties"].values()
            ), listed.name

        pending = await server.ok("publish_receipt", document=document(workflow_id))
        assert pending["receipt_status"] == "pending"
        assert pending["receipt_id"] is None and pending["url"] is None
        assert "published from it at this server's next tool call" in pending["note"]

        for tool, arguments in [
            ("get_receipt", {"id": str(uuid.uuid4())}),
            ("list_receipts", {"workflow_id": workflow_id}),
            ("verify_receipt", {"target": str(uuid.uuid4())}),
        ]:
            failure = await server.error(tool, **arguments)
            assert failure["type"] == UNREACHABLE, failure
            assert failure["title"] == "The site cannot be reached"
            assert "cannot be reached" in failure["detail"] and failure["status"] is None

        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert f"pending: not yet published (idempotency key {pending['idempotency_key']})" in (
            handed["handoff"]
        )
        assert handed["receipts"] == [{
            "idempotency_key": pending["idempotency_key"], "phase": "end",
            "receipt_status": "pending", "url": None,
        }]

        # The SDK's own argument checks answer problem objects too.
        wrong = await server.error("list_receipts", limit="many")
        assert wrong["type"] == PROBLEM_TYPE + "invalid-arguments"
        assert [e["field"] for e in wrong["errors"]] == ["/limit"]
        missing = await server.error("get_receipt")
        assert [e["field"] for e in missing["errors"]] == ["/id"]
        unknown = await server.error("delete_receipt", id="x")
        assert unknown["type"] == PROBLEM_TYPE + "unknown-tool"

    [entry] = Client(NO_SITE, "rk_x", outbox_path).entries(workflow_id)
    assert entry.receipt_status == "pending"
    assert "Traceback" not in stderr.read_text()


async def test_what_an_earlier_run_left_pending_is_published_when_the_server_starts(
    outbox_path: Path, tmp_path: Path, refused_url: str, workflow_id: str
) -> None:
    earlier = Client(refused_url, "rk_key", outbox_path, deadline=0.1)
    left = earlier.record(document(workflow_id))
    assert left.receipt_status == "pending"

    def site(seen: Any) -> tuple[int, dict[str, str], bytes]:
        if seen.method == "POST":
            return created(str(uuid.uuid4()), "http://site")
        return problem(404, "not-found", detail="nothing here")

    with ScriptedServer(then=site) as server:
        async with mcp_session(server.url, "rk_key", outbox_path, tmp_path / "err"):
            for _ in range(100):  # no tool is called: the flush at start does it
                [entry] = earlier.entries(workflow_id)
                if entry.receipt_status == "published":
                    break
                await anyio.sleep(0.1)
            assert entry.receipt_status == "published"
        assert [(s.method, s.path) for s in server.seen] == [("POST", "/api/receipts")]
