"""``attndesk.core.interp.registers``, a documented older path: it is ``attndesk.interp.registers`` itself."""

import sys

from attndesk.interp import registers

sys.modules[__name__] = registers
