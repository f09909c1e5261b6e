"""Widgets and helpers the tabs, docks and window share.

- ``heatmap``: ``MatrixPlot``, the labelled matrix every view draws with; ``token_axis``: token-labelled axes.
- ``lazy_plot``: ``LazyPlot``, where a plot goes, built on its first show or use.
- ``plot_axes``: axis labels kept as set; ``pacing``: pages of plots painted a piece per turn.
- ``stages``: what the step-through shows (formulas, a cell's arithmetic), without widgets.
- ``table_items``: sortable table items; ``interp``: the interpretability views' token field and run bar.
- ``named``: a widget's name and Qt properties, typed; ``styles``: style sheets set only when they change.
- ``holdings``: the ``Holds`` protocol: a widget declares the arrays it keeps (``holdings()``).
- ``menus``: the menu bar as named menus with named sections (the window, modes and tabs add actions by name).
"""
