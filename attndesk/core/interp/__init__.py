"""``attndesk.core.interp``, a documented older path: ``attndesk.interp``'s names, and its modules
``image_maps`` and ``registers``."""

from attndesk.interp import *  # noqa: F403
from attndesk.interp import __all__ as __all__
