"""The Generate tab (a decoder writes token by token): its view (``view``) and presenter
(``presenter``)."""
