"""The modes of the window (see ``base``): ``toy``, ``pretrained`` (a package: the pretrained mode and
what only it uses), ``long`` (long documents)."""
