"""The Logit lens tab (a real model): its view (``view``) and presenter (``presenter``)."""
