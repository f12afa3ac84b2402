"""The site's own install brings everything the site imports: `pip install -e .` alone, in a
fresh virtualenv, gives a site that starts. Checked from the source: every distribution a
module of receiptsite/ imports is one pyproject.toml's [project] dependencies name."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def declared(pyproject: Path) -> set[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return {canonical(re.split(r"[\s<>=!~;\[@]", spec, maxsplit=1)[0])
            for spec in project["dependencies"]}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported(folder: Path) -> set[str]:
    """The top-level modules the package's files import, but its own and the standard
    library's."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.partition(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", folder.name}


def distributions(modules: set[str]) -> dict[str, set[str]]:
    found = packages_distributions()
    return {module: {canonical(d) for d in found.get(module, [])} for module in modules}


def test_every_distribution_the_site_imports_is_a_dependency_of_its_own() -> None:
    dependencies = declared(REPO / "pyproject.toml")
    wanted = distributions(imported(REPO / "receiptsite"))
    assert "receiptsite-client" in wanted["receiptsite_client"]
    missing = {module: dists for module, dists in wanted.items() if not dists & dependencies}
    assert missing == {}, f"imported by receiptsite/ but not in its dependencies: {missing}"


def test_the_client_installs_without_django() -> None:
    dependencies = declared(REPO / "clients/python/pyproject.toml")
    assert "django" not in dependencies
    wanted = distributions(imported(REPO / "clients/python/receiptsite_client"))
    assert "django" not in {d for dists in wanted.values() for d in dists}
    assert "receiptsite" not in wanted
