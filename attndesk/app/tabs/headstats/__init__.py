"""The head statistics tab: its view (``view``) and presenter (``presenter``)."""
