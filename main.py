"""Launch attndesk (the window; without a display, the sample heatmaps are rendered headless)."""

import sys

from attndesk.cli import launch_app

if __name__ == "__main__":
    sys.exit(launch_app())
