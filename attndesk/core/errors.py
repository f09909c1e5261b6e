"""``attndesk.core.errors``, a documented older path: it is ``attndesk.errors`` itself."""

import sys

from attndesk import errors

sys.modules[__name__] = errors
