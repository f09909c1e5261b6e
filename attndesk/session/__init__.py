"""The window's model without widgets, shared by the window and the command line.

- ``state``: every choice the user makes, one evented model (``AppState``), and the flags' reading
  of it (``state_from_flags``);
- ``file``: a session as a small JSON file (``session_json``, ``load_session``, ``save_session``);
- ``results``: what a run publishes and the views draw (``Shown``);
- ``status``: the status line's evented model;
- ``plans``: when a toy run is long (its estimate, the rule that makes it wait for Run).
- ``bundle``: a run and its state as one reproducible ``.zip`` (written, read, checked);
- ``ledger``: the window's memory ledger (``MemoryLedger``): everything the window keeps beside
  its work, held against one budget.

Qt-free and window-free (import-linter's contract): ``attndesk.app`` builds widgets on it, and
``attndesk.cli`` reads and writes sessions through it without importing the window.
"""
