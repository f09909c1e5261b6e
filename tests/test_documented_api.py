"""Every public name the docs show is importable from the path they show it at: the imports in the
code blocks of the user docs (``from attndesk.x import a, b``, ``import attndesk.x``) and every
dotted name in inline code (```attndesk.core.interp.image_maps.flow_map```). A module that moves
keeps its old path re-exporting what the docs name, or this fails."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / name
        for name in (
            "python-api.md",
            "corpus.md",
            "train.md",
            "interp.md",
            "export.md",
            "kvcache.md",
            "vision.md",
            "cli.md",
            "user-guide.md",
        )
    ),
]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
IMPORT = re.compile(
    r"^[ \t]*(from[ \t]+attndesk[\w.]*[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+attndesk[\w.]*)", re.MULTILINE
)
DOTTED = re.compile(r"`(attndesk(?:\.\w+)+)(?:\(\))?`")


def documented_imports() -> list[tuple[str, str, str | None]]:
    """(doc, module, name) for every attndesk import in the docs' code blocks (name None: a module)."""
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text(encoding="utf-8")):
            for statement in IMPORT.findall(block):
                node = ast.parse(statement.strip()).body[0]
                if isinstance(node, ast.ImportFrom):
                    found += [(doc.name, str(node.module), alias.name) for alias in node.names]
                elif isinstance(node, ast.Import):
                    found += [(doc.name, alias.name, None) for alias in node.names]
    return found


def documented_dotted_names() -> list[tuple[str, str]]:
    """(doc, dotted name) for every ``attndesk.…`` in the docs' inline code."""
    return [(doc.name, m.group(1)) for doc in DOCS for m in DOTTED.finditer(doc.read_text(encoding="utf-8"))]


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError as error:
            if error.name is None or not dotted.startswith(error.name):
                raise  # a module that exists failed to import one of its own dependencies
            continue
        for attribute in parts[end:]:
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(dotted)


IMPORTS = documented_imports()
DOTTED_NAMES = documented_dotted_names()


def test_the_docs_show_the_public_api() -> None:
    """The parsing finds what the docs are known to show (a doc rewritten into another form shows here)."""
    modules = {module for _, module, _ in IMPORTS}
    assert {
        "attndesk.core",
        "attndesk.models",
        "attndesk.corpus",
        "attndesk.train",
        "attndesk.kvcache",
    } <= modules
    assert ("python-api.md", "attndesk.core", "run_attention") in IMPORTS
    assert any(doc == "interp.md" for doc, _ in DOTTED_NAMES)
    assert len(IMPORTS) >= 25 and len(DOTTED_NAMES) >= 30


@pytest.mark.parametrize(("doc", "module", "name"), IMPORTS, ids=[f"{d}:{m}.{n}" for d, m, n in IMPORTS])
def test_every_documented_import_works(doc: str, module: str, name: str | None) -> None:
    imported = importlib.import_module(module)
    if name is not None:
        assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None, (
            f"{doc} shows `from {module} import {name}`"
        )


@pytest.mark.parametrize(("doc", "dotted"), DOTTED_NAMES, ids=[f"{d}:{n}" for d, n in DOTTED_NAMES])
def test_every_documented_dotted_name_resolves(doc: str, dotted: str) -> None:
    try:
        resolve(dotted)
    except (ModuleNotFoundError, AttributeError) as error:
        pytest.fail(f"{doc} names `{dotted}`, which does not resolve: {error}")
