"""``attndesk.core.pipeline``, a documented older path: it is ``attndesk.runs.pipeline`` itself."""

import sys

from attndesk.runs import pipeline

sys.modules[__name__] = pipeline
