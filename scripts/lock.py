"""Write requirements.lock: every package ``make setup`` installs, as the exact wheel pip chose
(``name @ url --hash=sha256:...``), so that a fresh virtualenv installs them without asking an
index about each package.

``python scripts/lock.py`` (``make lock``) asks pip what ``pip install torch==2.13.0 'setuptools>=68'
-e '.[test]'`` would install into an empty environment (``--dry-run --ignore-installed --report``,
with this machine's pip configuration: its indexes, find-links and constraints) and writes one line
per package but torch (installed first from its own line in the Makefile) and attndesk itself.
Run it after changing pyproject.toml's dependencies; ``make setup`` still resolves pyproject's
ranges after installing the lock, so a lock that lags behind is completed, never trusted blindly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
# installed by their own lines in the Makefile, before the lock
NOT_LOCKED = {"torch", "attndesk"}
HEADER = """\
# Written by `make lock` (scripts/lock.py): the wheels `make setup` installs with --no-deps before
# resolving pyproject.toml's ranges (which then finds everything installed). One line per package.
"""


def locked_lines(report: dict) -> list[str]:
    """``name @ url --hash=sha256:...`` for each package of a pip installation report."""
    lines = []
    for item in report["install"]:
        name = item["metadata"]["name"]
        if name.lower() in NOT_LOCKED:
            continue
        info = item["download_info"]
        sha256 = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha256:
            raise SystemExit(f"lock: pip gave no sha256 for {name} ({info['url']})")
        lines.append(f"{name} @ {info['url']} --hash=sha256:{sha256}")
    return sorted(lines, key=str.lower)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        args = ["install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report_path)]
        args += ["torch==2.13.0", "setuptools>=68", "-e", ".[test]"]
        subprocess.run([sys.executable, "-m", "pip", *args], cwd=ROOT, check=True)
        report = json.loads(report_path.read_text(encoding="utf-8"))
    lines = locked_lines(report)
    LOCK.write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"lock: {len(lines)} packages written to {LOCK.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
