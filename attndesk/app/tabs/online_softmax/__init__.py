"""The online softmax tab: its view (``view``) and presenter (``presenter``)."""
