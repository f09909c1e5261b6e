"""The window's structure stays as designed: import-linter's contracts (pyproject.toml), no attndesk
import hidden inside a function, and functions short enough to read at once."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "attndesk" / "app"
# the heatmap widgets and the export dialog are the renderer's part of the window (its branch converts them)
RENDER_OWNED = {
    "tabs/heatmaps/view.py",
    "sources/heatmap_source.py",
    "widgets/token_axis.py",
    "sources/long_source.py",
    "tabs/heatmaps/grid.py",
    "widgets/heatmap.py",
    "window/export_dialog.py",
}
MAX_LINES = 60


def _app_modules():
    for path in sorted(APP.rglob("*.py")):
        if path.relative_to(APP).as_posix() not in RENDER_OWNED:
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_attndesk_import_hides_in_a_function():
    hidden = []
    for path, tree in _app_modules():
        for fn in _functions(tree):
            if path.name == "__init__.py" and fn.name == "__getattr__":
                continue  # a package's lazy export (attndesk.app.MainWindow)
            for node in ast.walk(fn):
                relative = isinstance(node, ast.ImportFrom) and node.level > 0
                named = (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attndesk")) or (
                    isinstance(node, ast.Import) and any(a.name.startswith("attndesk") for a in node.names)
                )
                if relative or named:
                    hidden.append(f"{path.relative_to(ROOT)}:{node.lineno} in {fn.name}")
    assert hidden == []


def test_functions_fit_on_a_screen():
    long = [
        f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path, tree in _app_modules()
        for fn in _functions(tree)
        if fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]
    assert long == []


def test_no_wait_keeps_the_gil():
    """PySide6's ``QTest.qWait`` keeps the GIL while it waits, so the window's worker threads barely
    run (measured: a counting thread ran at 0.5% of its speed) and a wait for them to finish runs to
    its limit. Tests wait with ``qtbot.wait`` / ``qtbot.waitSignal``, the soak with
    ``tests.soak.gestures.pump``: both run a ``QEventLoop``, which lets go of the GIL."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for folder in ("attndesk", "tests", "benchmarks", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "qWait"
    ]
    assert found == []


# what reads a clock or the resident set in a test; time.monotonic stays free for the deadlines of waits
CLOCK_ATTRIBUTES = {"perf_counter", "perf_counter_ns", "thread_time", "process_time", "memory_info"}
CLOCK_NAMES = {"perf_counter", "thread_time", "process_time", "Heartbeat", "QElapsedTimer"}


def _reads_clock(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in CLOCK_ATTRIBUTES)
        or (
            isinstance(n, ast.Attribute) and n.attr == "time" and isinstance(n.value, ast.Name) and n.value.id == "time"
        )
        or (isinstance(n, ast.Name) and n.id in CLOCK_NAMES)
        for n in ast.walk(node)
    )


def _calls_any(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _marks_perf(node: ast.AST) -> bool:
    return re.search(r"\bmark\.perf\b", ast.unparse(node)) is not None


def test_no_clock_outside_the_perf_tier():
    """The correctness tier (``make test``, in parallel) never reads a clock: a test that times work,
    takes GUI-thread CPU per heartbeat gap or reads the resident set is marked ``perf`` (``make
    test-perf``, serially). A helper that reads one taints every test that calls it, in any module."""
    modules = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "tests").rglob("test_*.py"))}
    helpers = [
        fn
        for tree in modules.values()
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("test_")
    ]
    tainted = {fn.name for fn in helpers if _reads_clock(fn)}
    while more := {fn.name for fn in helpers if fn.name not in tainted and _calls_any(fn, tainted)}:
        tainted |= more
    unmarked = [
        f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}"
        for path, tree in modules.items()
        if not any(
            isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "pytestmark" and _marks_perf(n)
            for n in tree.body
        )
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef)
        and fn.name.startswith("test_")
        and not any(_marks_perf(d) for d in fn.decorator_list)
        and (_reads_clock(fn) or _calls_any(fn, tainted))
    ]
    assert unmarked == []
