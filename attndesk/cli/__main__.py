"""``python -m attndesk.cli [COMMAND ...]``: the same as the ``attndesk`` command."""

import sys

from attndesk.cli import main

sys.exit(main())
