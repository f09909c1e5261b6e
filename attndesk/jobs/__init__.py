"""The job model, Qt-free: what every long function of the core, interp, corpus and train takes.

``JobContext``: ``progress(fraction, message)``, ``cancelled`` / ``check()`` (raises ``Cancelled``)
and ``report(item)`` for partial results. ``job_context`` is the one door that turns the older
keywords (``progress=``, ``cancel=``, ``should_cancel=``, ``stop=``) into a context; ``plain_context``
is a context for scripts and tests, optionally with a one-line progress printer (all in ``context``).
``executor``: the one executor that runs the window's background jobs (``Channel`` declarations,
a latest-wins slot per lane, the side jobs' turn).
"""

from .context import (
    Cancel,
    Cancelled,
    JobContext,
    Progress,
    ProgressFn,
    job_context,
    plain_context,
)

__all__ = ["Cancel", "Cancelled", "JobContext", "Progress", "ProgressFn", "job_context", "plain_context"]
