"""The modes of the window (see ``base``): ``toy``, ``pretrained``, ``long`` (long documents)."""
