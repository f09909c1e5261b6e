"""``attndesk.core.threads``, a documented older path: it is ``attndesk.system.threads`` itself."""

import sys

from attndesk.system import threads

sys.modules[__name__] = threads
