"""``attndesk.core.attention``, a documented older path: it is ``attndesk.attention.kernel`` itself."""

import sys

from attndesk.attention import kernel

sys.modules[__name__] = kernel
