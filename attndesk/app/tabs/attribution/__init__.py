"""The Attribution tab (a real model): its view (``view``) and presenter (``presenter``)."""
