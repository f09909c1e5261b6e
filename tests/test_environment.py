"""The process environment: importing attndesk sets no variable; the entry points set the ones
torch reads when it loads, before it loads."""

from __future__ import annotations

import os
import subprocess
import sys

TORCH_VARIABLES = ("GOMP_SPINCOUNT", "THP_MEM_ALLOC_ENABLE")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in TORCH_VARIABLES}
    return subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=300
    )


def test_importing_attndesk_sets_no_environment_variable():
    done = _python(
        "import os; before = dict(os.environ); import attndesk, attndesk.core; "
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())"
    )
    assert done.returncode == 0, done.stderr


def test_the_command_sets_torchs_variables_before_torch_loads():
    done = _python(
        "import os, sys; import attndesk.cli; "
        "assert 'torch' not in sys.modules, 'the CLI module loads torch before its main can set the environment'; "
        "assert attndesk.cli.main(['--help']) == 0; "
        "print(os.environ['GOMP_SPINCOUNT'], os.environ['THP_MEM_ALLOC_ENABLE'])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "2000 1"


def test_a_users_own_setting_is_kept():
    done = _python(
        "import os; os.environ['GOMP_SPINCOUNT'] = '50'; import attndesk; attndesk.set_torch_environment(); "
        "print(os.environ['GOMP_SPINCOUNT'])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "50"
