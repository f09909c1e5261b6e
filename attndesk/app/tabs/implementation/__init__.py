"""The timing dock's attndesk vs PyTorch tab: its view (``view``) and presenter (``presenter``)."""
