"""The Positions tab (sinusoidal encoding, RoPE): its view (``view``) and presenter (``presenter``)."""
