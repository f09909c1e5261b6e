"""``attndesk.core.scoring``, a documented older path: it is ``attndesk.attention.scoring`` itself."""

import sys

from attndesk.attention import scoring

sys.modules[__name__] = scoring
