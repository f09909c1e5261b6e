"""The Step-through tab: its view (``view``), presenter (``presenter``) and a real model's layer
captured stage by stage (``steps``, Qt-free: a side job)."""
