"""Everything that runs off the GUI thread, in one place.

- ``channels``: every job channel of the window, declared once (which ones take the side jobs' turn).
- ``worker.JobRunner``: one lane of the one executor (``attndesk.jobs.executor``), its answers in
  the GUI thread.
- ``compute.ComputeController`` / ``compute.SideJobs``: the run of the current mode and the side
  jobs tied to its result (a teaching tab's heavy work), answered in the GUI thread.
- ``background.Background``: a widget's one-off request (an export) whose widget may go away.
- ``holdings``: the memory ledger (``attndesk.session.ledger``) wired to the window.
"""
