"""The KV cache tab: its view (``view``) and presenter (``presenter``)."""
