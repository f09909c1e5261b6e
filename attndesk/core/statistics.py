"""``attndesk.core.statistics``, a documented older path: it is ``attndesk.teaching.statistics`` itself."""

import sys

from attndesk.teaching import statistics

sys.modules[__name__] = statistics
