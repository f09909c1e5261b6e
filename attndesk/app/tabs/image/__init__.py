"""The Image tab (a vision model's input and its maps): its view (``view``) and presenter
(``presenter``)."""
