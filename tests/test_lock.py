"""requirements.lock (``make lock``, scripts/lock.py): the exact wheels ``make setup`` installs
before resolving pyproject.toml's ranges. Every direct requirement is locked at a version its
range admits, each line names one file (a wheel, or a source archive where
the package has no wheel) and its sha256, and the script writes what pip reports."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import lock  # noqa: E402 - scripts/ is not a package

LOCKED_ELSEWHERE = {"torch"}  # the Makefile's own line, before the lock


def _name_version(file: str):
    """A wheel's or a source archive's project name and version, from its file name."""
    return parse_wheel_filename(file)[:2] if file.endswith(".whl") else parse_sdist_filename(file)


def _lock() -> dict[str, tuple[str, str]]:
    """name -> (file name, sha256) of each line of requirements.lock."""
    out = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, rest = line.split(" @ ")
        url, sha = rest.split(" --hash=sha256:")
        out[canonicalize_name(name)] = (url.rsplit("/", 1)[1], sha)
    return out


def test_every_direct_requirement_is_locked_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    locked = _lock()
    for req in wanted:
        name = canonicalize_name(req.name)
        if name in LOCKED_ELSEWHERE:
            continue
        assert name in locked, f"{req.name} is not in requirements.lock: run make lock"
        version = _name_version(locked[name][0])[1]
        assert req.specifier.contains(version, prereleases=True), f"{req} but the lock has {version}: run make lock"


def test_every_line_is_one_file_of_its_package_with_its_sha256():
    locked = _lock()
    assert "attndesk" not in locked and "torch" not in locked
    for name, (file, sha) in locked.items():
        assert canonicalize_name(_name_version(file)[0]) == name
        assert len(sha) == 64 and int(sha, 16) >= 0


def _item(name: str, url: str, sha: str | None) -> dict:
    info: dict = {"url": url, "archive_info": {"hashes": {"sha256": sha}} if sha else {}}
    return {"metadata": {"name": name}, "download_info": info}


def test_the_script_writes_each_reported_wheel_but_torch_and_attndesk_sorted():
    report = {
        "install": [
            _item("torch", "file:///w/torch-2.13.0-cp311-none-any.whl", "a" * 64),
            _item("Zlib-Thing", "https://f/zlib_thing-1.0-py3-none-any.whl", "b" * 64),
            _item("attndesk", "file:///src", None),
            _item("anyio", "https://f/anyio-4.0-py3-none-any.whl", "c" * 64),
        ]
    }
    assert lock.locked_lines(report) == [
        f"anyio @ https://f/anyio-4.0-py3-none-any.whl --hash=sha256:{'c' * 64}",
        f"Zlib-Thing @ https://f/zlib_thing-1.0-py3-none-any.whl --hash=sha256:{'b' * 64}",
    ]
    with pytest.raises(SystemExit, match="no sha256 for anyio"):
        lock.locked_lines({"install": [_item("anyio", "https://f/anyio-4.0.tar.gz", None)]})
