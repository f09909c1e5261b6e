"""Everything that runs off the GUI thread, in one place.

- ``worker.JobRunner``: the one worker thread of a run (its turns: ``turns.Turns``).
- ``compute.ComputeController`` / ``compute.SideJobs``: the run of the current mode and the side
  jobs tied to its result (a teaching tab's heavy work), answered in the GUI thread.
- ``turns``: the turn-taking between the run and the side channels.
- ``background.Background``: a widget's one-off request (an export) whose widget may go away.
- ``holdings``: the memory ledger (``attndesk.session.ledger``) wired to the window.
"""
