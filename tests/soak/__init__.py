"""A seeded random-action soak of the real attndesk window.

``python -m tests.soak --seconds 240 --seed 7`` (or ``make soak SECONDS=240 SEED=7``) starts the
window in a child process (offscreen, everything written under a temporary folder), drives it with
a seeded random sequence of user actions, and reports exceptions, GUI-thread stalls, memory over
time, threads left after close and whether a known input is still computed and drawn correctly.

The driver knows the window only through Qt: it walks the widget tree and the menu bar for
controls (buttons, check boxes, combo boxes, spin boxes, sliders, text edits, tab bars, item views,
graphics views), so it keeps working when the window is rebuilt with another structure.

Modules: ``sandbox`` (the temporary folder, the pool of good and bad paths, the write guard),
``controls`` (discovery), ``gestures`` (mouse, keys, wheel, drops), ``actions`` (what to do with a
control), ``dialogs`` (file dialogs and modal/popup answering), ``monitors`` (exceptions, stalls,
memory, threads), ``checks`` (known input, memory return), ``report``, ``driver`` (the loop),
``child`` (the soak process) and ``supervise`` (runs the child, reports crashes and the result).
"""
