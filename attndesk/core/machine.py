"""``attndesk.core.machine``, a documented older path: it is ``attndesk.system.machine`` itself."""

import sys

from attndesk.system import machine

sys.modules[__name__] = machine
