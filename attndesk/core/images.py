"""``attndesk.core.images``, a documented older path: it is ``attndesk.models.images`` itself."""

import sys

from attndesk.models import images

sys.modules[__name__] = images
