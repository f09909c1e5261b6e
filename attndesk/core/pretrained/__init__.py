"""``attndesk.core.pretrained``, a documented older path: ``attndesk.models``'s names."""

from attndesk.models import *  # noqa: F403
from attndesk.models import __all__ as __all__
