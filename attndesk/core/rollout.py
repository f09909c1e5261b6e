"""``attndesk.core.rollout``, a documented older path: it is ``attndesk.teaching.rollout`` itself."""

import sys

from attndesk.teaching import rollout

sys.modules[__name__] = rollout
