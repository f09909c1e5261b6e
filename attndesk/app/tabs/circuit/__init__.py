"""The Circuit tab (edge scores, a circuit, a head's score terms): its view (``view``) and presenter
(``presenter``)."""
