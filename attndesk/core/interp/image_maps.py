"""``attndesk.core.interp.image_maps``, a documented older path: it is ``attndesk.interp.image_maps`` itself."""

import sys

from attndesk.interp import image_maps

sys.modules[__name__] = image_maps
