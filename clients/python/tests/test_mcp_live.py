"""receipt-mcp against a real site (tests/livesite.py), spoken to as an MCP client speaks to it:
the installed command as a subprocess, through the official SDK's stdio client and
ClientSession. The tools are listed with the site's own schemas; a receipt is published,
verified (valid, and invalid once its stored bytes are changed behind the site's back), read,
listed page by page and handed off; a document the site refuses is a tool error with its
`errors`; with the site stopped, publishing goes into the outbox and the rest says the site
cannot be reached, and what was kept is published once the site is back, also when the
server started while it was down. The tools without a site: test_mcp.py."""

from __future__ import annotations

import json
import re
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from client_helpers import LiveSite, document, site_document, site_keys, site_receipts
from mcp_helpers import TOOLS, UNREACHABLE, VARIABLES, command, mcp_session
from receiptsite_client import Client
from vector_helpers import REPO
from vector_helpers import run as run_verify

pytestmark = [pytest.mark.live, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def stderr(tmp_path: Path) -> Path:
    return tmp_path / "receipt-mcp.stderr"


def openapi(site: LiveSite) -> dict[str, Any]:
    answer = site.get("/api/openapi.json")
    assert answer.status == 200, answer
    described: dict[str, Any] = answer.json()
    return described


def cli_verdict(target: str) -> dict[str, Any]:
    """What `receipt-verify TARGET --json` prints."""
    done = run_verify(target, "--json")
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


# Changes a stored receipt's bytes behind the site's back, in the live site's own database (a
# manage.py process: whichever database the site runs on), as the site's own tests tamper:
# the append-only guard dropped, then one UPDATE.
TAMPER = textwrap.dedent(
    """
    from django.db import connection
    from receiptsite.receipts.models import Receipt
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("DROP TRIGGER IF EXISTS receipts_receipt_append_only"
                           " ON receipts_receipt")
        else:
            cursor.execute("DROP TRIGGER IF EXISTS receipts_receipt_no_update")
    receipt = Receipt.objects.get(public_id={receipt_id!r})
    data = bytes(receipt.canonical_bytes)
    assert b"12 findings" in data
    changed = Receipt.objects.filter(pk=receipt.pk).update(
        canonical_bytes=data.replace(b"12 findings", b"13 findings"))
    print("changed", changed)
    """
)


def readme_mcp_servers() -> dict[str, Any]:
    """The `mcpServers` entry the README shows."""
    text = (REPO / "README.md").read_text("utf-8")
    section = text[text.index("### Any MCP-speaking agent") :]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None
    servers: dict[str, Any] = json.loads(block[1])["mcpServers"]
    return servers


# --- tools and their schemas -------------------------------------------------------------------


async def test_the_tools_are_listed_with_the_sites_own_schemas_as_the_readme_configures_them(
    live_site: LiveSite, outbox_path: Path, stderr: Path
) -> None:
    [entry] = readme_mcp_servers().values()
    assert Path(entry["command"]).name == "receipt-mcp" and entry["args"] == []
    assert sorted(entry["env"]) == sorted(VARIABLES)
    described = openapi(live_site)
    site_receipt = described["components"]["schemas"]["ReceiptIn"]
    site_params = {
        p["name"]: p["schema"] for p in described["paths"]["/api/receipts"]["get"]["parameters"]
    }

    async with mcp_session(
        live_site.url, live_site.api_key, outbox_path, stderr,
        command_line=[command(), *entry["args"]],
    ) as server:
        tools = await server.tools()
        assert list(tools) == TOOLS
        publish = tools["publish_receipt"]
        assert publish.inputSchema["required"] == ["document"]
        assert publish.inputSchema["properties"]["document"] == site_receipt
        assert publish.description is not None
        assert f"read from {live_site.url}/api/openapi.json" in publish.description
        assert "pending" in publish.description and "idempotency_key" in publish.description

        listing = tools["list_receipts"].inputSchema["properties"]
        assert list(listing) == [
            "workflow_id", "session_id", "subject_name", "phase", "outcome", "since", "until",
            "limit", "cursor",
        ]
        assert set(listing) == set(site_params)  # every filter of the site, and no other
        for name, given in listing.items():
            # The site's schema, less its "empty is absent" alternative; or left out (null).
            [site_schema, absent] = given["anyOf"]
            assert absent == {"type": "null"} and given["default"] is None
            assert {"anyOf": [site_schema, {"const": ""}]} == site_params[name], name
            assert given["description"]
        assert listing["phase"]["anyOf"][0]["enum"] == site_receipt["properties"]["phase"][
            "enum"
        ]
        assert tools["verify_receipt"].inputSchema["required"] == ["target"]
        assert tools["get_receipt"].inputSchema["required"] == ["id"]
        assert tools["handoff"].inputSchema["required"] == ["workflow_id"]
        assert server.list_changes() == 0
    assert "Traceback" not in stderr.read_text()


# --- publish, verify, get, hand off ---------------------------------------------------------------


async def test_a_published_receipt_verifies_reads_back_and_hands_off(
    live_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    doc = document(workflow_id, idempotency_key=f"{workflow_id}/audit-site/end/1")
    async with mcp_session(live_site.url, live_site.api_key, outbox_path, stderr) as server:
        published = await server.ok("publish_receipt", document=doc)
        receipt_id = published["receipt_id"]
        assert published["receipt_status"] == "published"
        assert published["url"] == f"{live_site.url}/run/{receipt_id}"
        assert published["verify_url"] == f"{live_site.url}/api/receipt/{receipt_id}/verify"
        assert published["idempotency_key"] == doc["idempotency_key"]
        assert (published["replayed"], published["error"]) == (False, None)
        assert site_keys(live_site, workflow_id) == [doc["idempotency_key"]]
        # The same call again is the same receipt, replayed from the outbox.
        again = await server.ok("publish_receipt", document=doc)
        assert again["receipt_id"] == receipt_id
        assert len(site_receipts(live_site, workflow_id)) == 1

        cli = cli_verdict(published["url"])
        assert cli["status"] == "valid"
        for target in (receipt_id, published["url"], published["verify_url"]):
            verdict = await server.ok("verify_receipt", target=target)
            assert {k: verdict[k] for k in ("status", "checks")} == cli, target
            assert verdict["receipt_id"] == receipt_id
            assert any("not independent of the site" in note for note in verdict["notes"])
        keys = live_site.get("/.well-known/receipt-keys.json").json()
        pinned = await server.ok("verify_receipt", target=receipt_id, key=keys["keys"][0]["x"])
        assert pinned["status"] == "valid"
        assert not any("not independent" in note for note in pinned["notes"])

        for given in (receipt_id, published["url"]):
            read = await server.ok("get_receipt", id=given)
            assert read["id"] == receipt_id and read["workflow_id"] == workflow_id
            assert read["document"] == site_document(live_site, receipt_id)
            assert read["document"]["result"] == "12 findings"
        unknown = await server.error("get_receipt", id=str(uuid.uuid4()))
        assert (unknown["status"], unknown["type"]) == (404, f"{live_site.url}/problems/not-found")

        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert handed["handoff"] == Client(live_site.url, "", outbox_path).handoff(workflow_id)
        assert f"Receipt:            {published['url']}\n" in handed["handoff"]
        assert handed["receipts"] == [{
            "idempotency_key": doc["idempotency_key"], "phase": "end",
            "receipt_status": "published", "url": published["url"],
        }]
    assert "Traceback" not in stderr.read_text()


async def test_a_receipt_whose_stored_bytes_were_changed_verifies_invalid(
    live_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    async with mcp_session(live_site.url, live_site.api_key, outbox_path, stderr) as server:
        published = await server.ok("publish_receipt", document=document(workflow_id))
        receipt_id = published["receipt_id"]
        before = await server.ok("verify_receipt", target=receipt_id)
        assert before["status"] == "valid"

        assert "changed 1" in live_site.manage("shell", "-c", TAMPER.format(
            receipt_id=receipt_id))
        verdict = await server.ok("verify_receipt", target=published["url"])
        assert verdict["status"] == "invalid"
        failed = [check["name"] for check in verdict["checks"] if check["result"] == "fail"]
        assert "hash" in failed  # the bytes no longer hash to what was signed and logged
        assert {k: verdict[k] for k in ("status", "checks")} == cli_verdict(published["url"])
        # The site now serves the changed bytes: that is what was caught.
        changed = await server.ok("get_receipt", id=receipt_id)
        assert changed["document"]["result"] == "13 findings"


# --- listing ------------------------------------------------------------------------------------


async def test_list_filters_and_pages_with_the_cursor(
    live_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    async with mcp_session(live_site.url, live_site.api_key, outbox_path, stderr) as server:
        ids = []
        for n in range(5):
            changes: dict[str, Any] = {"step_id": f"step-{n}"}
            if n % 2:
                changes.update(phase="start", outcome=None, result=None)
            published = await server.ok(
                "publish_receipt", document=document(workflow_id, **changes)
            )
            ids.append(published["receipt_id"])
        other = await server.ok("publish_receipt", document=document(f"{workflow_id}-other"))

        pages, cursor = [], None
        while True:
            page = await server.ok(
                "list_receipts", workflow_id=workflow_id, limit=2,
                **({"cursor": cursor} if cursor else {}),
            )
            pages.append([summary["id"] for summary in page["receipts"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [len(page) for page in pages] == [2, 2, 1]
        assert [i for page in pages for i in page] == ids[::-1]  # newest first, each once

        starts = await server.ok("list_receipts", workflow_id=workflow_id, phase="start")
        assert [s["id"] for s in starts["receipts"]] == [ids[3], ids[1]]
        assert {s["outcome"] for s in starts["receipts"]} == {None}
        ends = await server.ok("list_receipts", workflow_id=workflow_id, outcome="succeeded",
                               subject_name="website_audit")
        assert [s["id"] for s in ends["receipts"]] == [ids[4], ids[2], ids[0]]
        everything = await server.ok("list_receipts", limit=200)
        assert {*ids, other["receipt_id"]} <= {s["id"] for s in everything["receipts"]}

        refused = await server.error("list_receipts", phase="finished")
        assert refused["status"] == 400
        assert refused["type"] == f"{live_site.url}/problems/bad-query-parameter"
        assert [e["field"] for e in refused["errors"]] == ["phase"]
        forged = await server.error("list_receipts", cursor="not-a-cursor")
        assert forged["status"] == 400 and [e["field"] for e in forged["errors"]] == ["cursor"]


# --- a document the site refuses ------------------------------------------------------------------


async def test_a_document_the_site_refuses_is_a_tool_error_with_its_errors(
    live_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    async with mcp_session(live_site.url, live_site.api_key, outbox_path, stderr) as server:
        refused = await server.error(
            "publish_receipt", document={"workflow_id": workflow_id, "outcome": "maybe"}
        )
        assert refused["status"] == 422
        assert refused["type"] == f"{live_site.url}/problems/validation-error"
        fields = {e["field"]: e["message"] for e in refused["errors"]}
        assert set(fields) == {"/phase", "/subject", "/outcome"}, fields
        assert fields["/phase"] == "is required"
        assert refused["entry"]["receipt_status"] == "failed"
        assert refused["entry"]["error"].startswith("422 validation-error")
        assert site_receipts(live_site, workflow_id) == []
        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert "failed: 422 validation-error" in handed["handoff"]


# --- the site down --------------------------------------------------------------------------------


async def test_with_the_site_down_publishing_goes_into_the_outbox_and_out_once_it_is_back(
    own_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    async with mcp_session(own_site.url, own_site.api_key, outbox_path, stderr) as server:
        before = await server.ok("publish_receipt", document=document(workflow_id, step_id="a"))
        assert before["receipt_status"] == "published"
        own_site.stop()
        kept = await server.ok(
            "publish_receipt", document=document(workflow_id, step_id="b")
        )
        assert kept["receipt_status"] == "pending", kept
        assert kept["receipt_id"] is None and kept["url"] is None
        assert kept["error"].startswith("network:")
        assert "do not publish it again" in kept["note"]
        for tool, arguments in [
            ("get_receipt", {"id": before["receipt_id"]}),
            ("list_receipts", {"workflow_id": workflow_id}),
            ("verify_receipt", {"target": before["url"]}),
            ("verify_receipt", {"target": before["receipt_id"]}),
        ]:
            failure = await server.error(tool, **arguments)
            assert failure["type"] == UNREACHABLE, (tool, failure)
            assert failure["title"] == "The site cannot be reached"
            assert f"The site at {own_site.url} cannot be reached" in failure["detail"]
        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert [r["receipt_status"] for r in handed["receipts"]] == ["published", "pending"]
        assert "pending: not yet published" in handed["handoff"]
        own_site._serve()

        # The next tool call publishes what was kept, before it does its own work.
        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert [r["receipt_status"] for r in handed["receipts"]] == ["published", "published"]
        url = handed["receipts"][1]["url"]
        assert url and f"Receipt:            {url}\n" in handed["handoff"]
        assert site_keys(own_site, workflow_id) == sorted(
            [before["idempotency_key"], kept["idempotency_key"]]
        )
        verdict = await server.ok("verify_receipt", target=url)
        assert verdict["status"] == "valid"
        [summary] = (await server.ok("list_receipts", workflow_id=workflow_id, limit=1))[
            "receipts"
        ]
        assert summary["url"] == url  # the newest: the one kept while the site was down
    assert "Traceback" not in stderr.read_text()


async def test_a_server_started_while_the_site_is_down_starts_and_gets_the_schema_later(
    own_site: LiveSite, outbox_path: Path, stderr: Path, workflow_id: str
) -> None:
    own_site.stop()
    async with mcp_session(own_site.url, own_site.api_key, outbox_path, stderr) as server:
        publish = (await server.tools())["publish_receipt"]
        document_schema = publish.inputSchema["properties"]["document"]
        assert document_schema["type"] == "object" and "properties" not in document_schema
        assert publish.description is not None
        assert "could not be reached when the tools were listed" in publish.description
        kept = await server.ok("publish_receipt", document=document(workflow_id))
        assert kept["receipt_status"] == "pending"

        own_site._serve()
        # The first call that finds the site up publishes what was kept, and the server says
        # its tool list changed: the site's schema can be had now.
        listed = await server.ok("list_receipts", workflow_id=workflow_id)
        [summary] = listed["receipts"]
        assert server.list_changes() == 1
        publish = (await server.tools())["publish_receipt"]
        site_receipt = openapi(own_site)["components"]["schemas"]["ReceiptIn"]
        assert publish.inputSchema["properties"]["document"] == site_receipt
        handed = await server.ok("handoff", workflow_id=workflow_id)
        assert handed["receipts"][0]["receipt_status"] == "published"
        assert handed["receipts"][0]["url"] == summary["url"]
        await server.ok("list_receipts", workflow_id=workflow_id)
        assert server.list_changes() == 1  # said once
    assert "Traceback" not in stderr.read_text()
