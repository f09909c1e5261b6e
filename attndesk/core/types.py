"""``attndesk.core.types``, a documented older path: it is ``attndesk.attention.types`` itself."""

import sys

from attndesk.attention import types

sys.modules[__name__] = types
