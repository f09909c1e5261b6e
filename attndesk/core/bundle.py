"""``attndesk.core.bundle``, a documented older path: it is ``attndesk.session.bundle`` itself."""

import sys

from attndesk.session import bundle

sys.modules[__name__] = bundle
