"""``attndesk.core.config``, a documented older path: it is ``attndesk.runs.config`` itself."""

import sys

from attndesk.runs import config

sys.modules[__name__] = config
