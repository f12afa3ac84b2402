"""The repository documents its own contract, in docs/, and the docs cannot drift from the code:
the field table is the declaration's, every route is described, every link leads somewhere, and
nothing sends a reader outside the repository."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import URLPattern

from receiptsite import urls
from receiptsite.evidence import declaration as evidence
from receiptsite.evidence import docgen

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RECEIPT_FORMAT = DOCS / "receipt-format.md"
API = DOCS / "api.md"

# What is not part of the repository: git's own folder, and what .gitignore leaves out
# (local state, the virtualenv, caches, collected static files, build output).
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "var",
        "staticfiles",
        "build",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    }
)
SKIPPED_SUFFIXES = (".pyc", ".egg-info")

# Spelled in pieces, so that this file does not match itself.
OUTSIDE_POINTERS = (
    re.compile(re.escape("shared" + "/"), re.IGNORECASE),
    re.compile(re.escape("SPEC" + ".md"), re.IGNORECASE),
    re.compile("shared" + r"\s+" + "folder", re.IGNORECASE),
)

# URL patterns of these prefixes are the documented surface.
DOCUMENTED_PREFIXES = ("api/", ".well-known/", "run/", "healthz")


# --- helpers, each tested below on a document made to fail -----------------------------------


def repository_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.iterdir()):
        if path.name in SKIPPED_DIRS or path.name.endswith(SKIPPED_SUFFIXES):
            continue
        if path.is_dir() and not path.is_symlink():
            yield from repository_files(path)
        elif path.is_file():
            yield path


def outside_pointers(text: str) -> list[str]:
    return [match.group(0) for pattern in OUTSIDE_POINTERS for match in pattern.finditer(text)]


_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def relative_links(markdown: str) -> list[str]:
    """The targets of the Markdown links in `markdown` that are paths, not URLs or anchors,
    without their #fragment; code is not looked at."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    targets = []
    for target in _LINK.findall(prose):
        if _SCHEME.match(target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path.read_text(encoding="utf-8")):
        base = ROOT if target.startswith("/") else path.parent
        if not (base / target.lstrip("/")).exists():
            broken.append(target)
    return broken


def documented_path(route: str) -> str:
    """A URL pattern as the docs write it: `run/<receipt_id:receipt_id>` is `/run/<id>`."""
    route = route.replace("<receipt_id:receipt_id>", "<id>")
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)


def mentions_path(text: str, path: str) -> bool:
    # Not just a prefix of a longer path: /api/receipts must stand on its own somewhere.
    return re.search(re.escape(path) + r"(?![\w/.<>-])", text) is not None


def documented_routes() -> list[str]:
    routes = []
    for entry in urls.urlpatterns:
        if isinstance(entry, URLPattern):
            route = str(entry.pattern)
            if route.startswith(DOCUMENTED_PREFIXES):
                routes.append(documented_path(route))
    return routes


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


# --- (a) the generated field table is the declaration's -------------------------------------


def test_the_field_table_is_generated_from_the_declaration() -> None:
    block = docgen.generated_block(RECEIPT_FORMAT.read_text(encoding="utf-8"))
    assert block == docgen.receipt_format_fields(), (
        "The field table in docs/receipt-format.md differs from evidence.py's declaration. "
        "Rewrite it with: DJANGO_SETTINGS_MODULE=tests.settings "
        f".venv/bin/{docgen.COMMAND}"
    )


def test_the_drift_check_sees_an_edited_table(tmp_path: Path) -> None:
    text = RECEIPT_FORMAT.read_text(encoding="utf-8")
    edited = text.replace("| `workflow_id` |", "| `workflow` |", 1)
    assert docgen.generated_block(edited) != docgen.receipt_format_fields()
    # ... and the generator puts it right again.
    page = tmp_path / "receipt-format.md"
    page.write_text(edited, encoding="utf-8")
    docgen.main(page)
    assert page.read_text(encoding="utf-8") == docgen.with_block(
        text, docgen.receipt_format_fields()
    )


def test_the_generated_block_needs_its_markers() -> None:
    with pytest.raises(ValueError):
        docgen.generated_block("no markers here\n")
    with pytest.raises(ValueError):
        docgen.generated_block(f"{docgen.START}\n{docgen.START}\n{docgen.END}\n")


def test_the_table_has_one_row_per_field_in_the_declarations_order() -> None:
    rows = [
        line.split("|")[1].strip().strip("`")
        for line in docgen.receipt_format_fields().splitlines()[2:]
    ]
    assert rows == [".".join(path) for path, _ in evidence.walk(evidence.DOCUMENT)]
    assert "subject.name" in rows and "links.child_idempotency_keys" in rows


# --- (b) every field of the declaration is documented -----------------------------------------


def test_every_field_of_the_declaration_is_in_the_receipt_format() -> None:
    text = RECEIPT_FORMAT.read_text(encoding="utf-8")
    # The words around the table, too, say what each top-level field is for.
    prose = text.replace(docgen.generated_block(text), "")
    missing = [
        ".".join(path)
        for path, _ in evidence.walk(evidence.DOCUMENT)
        if f"`{'.'.join(path)}`" not in (prose if len(path) == 1 else text)
    ]
    assert not missing, f"docs/receipt-format.md does not describe {missing}"


def test_every_site_field_and_boundary_statement_is_in_the_receipt_format() -> None:
    text = " ".join(RECEIPT_FORMAT.read_text(encoding="utf-8").split())
    missing = [f for f in sorted(evidence.SITE_FIELDS) if f"`{f}`" not in text]
    missing += [
        f"the {phase} boundary"
        for phase, statement in evidence.BOUNDARY.items()
        if statement not in text
    ]
    assert not missing, f"docs/receipt-format.md does not state {missing}"


# --- (c) every route is in the API reference --------------------------------------------------


def test_every_route_is_in_the_api_reference() -> None:
    text = API.read_text(encoding="utf-8")
    routes = documented_routes()
    assert "/api/receipts/<id>" in routes and "/healthz" in routes
    missing = [route for route in routes if not mentions_path(text, route)]
    assert not missing, f"docs/api.md does not describe {missing}"


def test_a_route_is_not_documented_by_a_longer_one() -> None:
    assert documented_path("api/receipt/<receipt_id:receipt_id>/verify") == (
        "/api/receipt/<id>/verify"
    )
    assert not mentions_path("`POST /api/receipts/batch`", "/api/receipts")
    assert not mentions_path("`GET /api/receipts/<id>`", "/api/receipts")
    assert mentions_path("`GET /api/receipts?limit=`", "/api/receipts")
    assert mentions_path("`GET /run/<id>`", "/run/<id>")


# --- (d) nothing points outside the repository -----------------------------------------------


def test_nothing_in_the_repository_points_outside_it() -> None:
    offenders = []
    for path in repository_files(ROOT):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            text = path.read_bytes().decode("utf-8", "replace")
        for found in outside_pointers(text):
            offenders.append(f"{path.relative_to(ROOT)}: {found!r}")
    assert not offenders, (
        "These files send the reader to a document outside the repository; say it in the "
        "repository's own words (docs/) instead:\n" + "\n".join(offenders)
    )


def test_the_outside_pointers_are_recognised() -> None:
    assert outside_pointers("see `" + "SPEC" + ".md` in the " + "shared\nfolder")
    assert outside_pointers("/work/" + "shared" + "/EXAMPLES.md")
    assert not outside_pointers("the spec is silent; shared state; /usr/share/doc")


def test_the_walk_skips_what_is_not_the_repository(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("x")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "a.py").write_text("x")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("x")
    (tmp_path / "README.md").write_text("x")
    found = [p.relative_to(tmp_path).as_posix() for p in repository_files(tmp_path)]
    assert found == ["README.md", "docs/a.md"]


# --- (e) every relative link leads to a file -------------------------------------------------


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(ROOT)} links to missing files"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [anchor](#x) [web](https://example.org) [gone](missing.md#part)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page.read_text(encoding="utf-8")) == ["page.md", "missing.md"]
    assert broken_links(page) == ["missing.md"]


def test_the_readme_links_the_reference() -> None:
    links = relative_links((ROOT / "README.md").read_text(encoding="utf-8"))
    for page in ("docs/README.md", "docs/receipt-format.md", "docs/verification.md",
                 "docs/log.md", "docs/api.md"):
        assert page in links, f"README.md does not link {page}"
