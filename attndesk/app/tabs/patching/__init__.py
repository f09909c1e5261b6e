"""The Patching tab (activation patching on a real model): its view (``view``) and presenter
(``presenter``)."""
