"""``attndesk.core``'s names are imported on first use: each one is its submodule's object, the
lists for type checkers and for the run time agree, the light parts load without torch, and the
older paths the docs have shown are the moved modules themselves."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import attndesk.core as core

ROOT = Path(__file__).resolve().parents[2]


def test_the_type_checkers_imports_are_the_lazy_names():
    tree = ast.parse((ROOT / "attndesk" / "core" / "__init__.py").read_text(encoding="utf-8"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    imported = {
        node.module: tuple(a.name for a in node.names) for node in block.body if isinstance(node, ast.ImportFrom)
    }
    assert imported == core._EXPORTS
    assert sorted(core.__all__) == sorted(core._WHERE)


def test_every_name_is_its_submodules_object():
    for name, module in core._WHERE.items():
        assert getattr(core, name) is getattr(importlib.import_module(module), name)
    assert set(core.__all__) <= set(dir(core))
    with pytest.raises(ImportError):
        exec("from attndesk.core import no_such_name", {})


def test_errors_and_atomic_writes_load_without_torch():
    code = "import sys, attndesk.files.atomic, attndesk.errors, attndesk.core.errors; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


@pytest.mark.parametrize(
    "package",
    ["attndesk.interp", "attndesk.models", "attndesk.core.interp", "attndesk.core.pretrained", "attndesk.kvcache"],
)
def test_importing_every_submodule_keeps_the_exported_names(package):
    """Importing a submodule sets it as its package's attribute: a submodule named like a function the
    package exports, and not imported by the package itself (``interp.faithfulness`` was one), would
    replace that function for everyone once some other module imported it."""
    pkg = importlib.import_module(package)
    exported = {name: getattr(pkg, name) for name in pkg.__all__}
    for path in Path(pkg.__file__).parent.glob("*.py"):
        if path.stem != "__init__":
            importlib.import_module(f"{package}.{path.stem}")
    assert [name for name, obj in exported.items() if getattr(pkg, name) is not obj] == []


# the modules' older paths the docs have shown: each is the moved module itself
OLDER_MODULES = {
    "attndesk.core.attention": "attndesk.attention.kernel",
    "attndesk.core.bundle": "attndesk.session.bundle",
    "attndesk.core.config": "attndesk.runs.config",
    "attndesk.core.errors": "attndesk.errors",
    "attndesk.core.images": "attndesk.models.images",
    "attndesk.core.machine": "attndesk.system.machine",
    "attndesk.core.pipeline": "attndesk.runs.pipeline",
    "attndesk.core.rollout": "attndesk.teaching.rollout",
    "attndesk.core.scoring": "attndesk.attention.scoring",
    "attndesk.core.statistics": "attndesk.teaching.statistics",
    "attndesk.core.threads": "attndesk.system.threads",
    "attndesk.core.types": "attndesk.attention.types",
    "attndesk.core.interp.image_maps": "attndesk.interp.image_maps",
    "attndesk.core.interp.registers": "attndesk.interp.registers",
}


@pytest.mark.parametrize(("old", "new"), OLDER_MODULES.items())
def test_an_older_module_path_is_the_moved_module(old, new):
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert sys.modules[old] is module


@pytest.mark.parametrize(
    ("old", "new"), [("attndesk.core.pretrained", "attndesk.models"), ("attndesk.core.interp", "attndesk.interp")]
)
def test_an_older_package_path_has_the_moved_packages_names(old, new):
    facade, moved = importlib.import_module(old), importlib.import_module(new)
    assert facade.__all__ == moved.__all__
    assert [name for name in moved.__all__ if getattr(facade, name) is not getattr(moved, name)] == []


def test_the_core_holds_only_the_facade():
    """Every module under attndesk/core is a re-export: the package's lazy names, a package's names or
    a module that replaces itself with the moved one."""
    for path in sorted((ROOT / "attndesk" / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [
            n
            for n in tree.body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name not in {"__getattr__", "__dir__"}
        ]
        assert defined == [], path
