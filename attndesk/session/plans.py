"""When a toy run is long: the time estimate the window shows and the rule that makes a run wait
for an explicit Run (F5). Qt-free; the toy mode's job applies the rule in the worker, the long
document mode shows the plan."""

from __future__ import annotations

from attndesk.runs.plan import FULL, RunPlan
from attndesk.system.free_memory import format_bytes

LONG_RUN_S = 5.0  # a run estimated longer than this waits for an explicit Run (F5)
# The time estimate is the core's (``RunPlan.seconds``: FLOPs, with a floor per computed cell).


# A run estimated shorter than this reports no stages: each report crosses to the GUI thread and
# redraws the status line and the progress bar while the run competes for the same cores, for a
# stage name nobody can read.
QUIET_RUN_S = 0.1


def reports_progress(plan: RunPlan) -> bool:
    """Whether a run of ``plan`` should report its stages (a memory-bounded or long run)."""
    return plan.kind != FULL or plan.seconds is None or plan.seconds >= QUIET_RUN_S


def needs_explicit_run(plan: RunPlan) -> bool:
    """Whether a run should wait for Run/F5 instead of starting while the user types."""
    if plan.peak_bytes > plan.budget:
        return True  # over the memory budget even with the pyramid
    if plan.seconds is None:  # a GPU: no time estimate, so hold the memory-bounded runs
        return plan.kind != FULL
    return plan.seconds > LONG_RUN_S


def eta(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def sizes(plan: RunPlan) -> str:
    return f"{plan.lq:,} tokens" if plan.lq == plan.lk else f"{plan.lq:,}×{plan.lk:,} tokens"


def short_plan(plan: RunPlan) -> str:
    """A few words for the status bar's plan label (``describe_plan`` is the tooltip)."""
    if plan.kind == FULL:
        kept = f"full weights {format_bytes(plan.weights_bytes)}"
    elif plan.storage == "pyramid":
        kept = f"{plan.overview_px} px overview + exact on demand"
    else:
        kept = f"weights as {plan.storage} + exact on demand"
    seconds = plan.seconds
    time_part = "" if seconds is None else (" · under 1 s" if seconds < 1 else f" · ~{eta(seconds)}")
    over = " · OVER BUDGET" if plan.peak_bytes > plan.budget else ""
    return f"{sizes(plan)}: {kept}{time_part}{over}"


def describe_plan(plan: RunPlan) -> str:
    """The plan in one line, with the core's time estimate (the window's tooltip and status line)."""
    return plan.describe()


def held_line(plan: RunPlan) -> str:
    """The status line of a held run: the action first (a narrow window cuts the end)."""
    seconds = plan.seconds
    why = (
        "over the memory budget even as an overview"
        if plan.peak_bytes > plan.budget
        else f"a long run (~{eta(seconds)})"
        if seconds
        else "a long run"
    )
    return f"{sizes(plan)}: {why} — press Run (F5) to start it · {describe_plan(plan)}"
