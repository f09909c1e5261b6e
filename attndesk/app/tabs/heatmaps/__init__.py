"""The Heatmaps tab, the per-head heatmap panel: the panel (``view``, ``HeatmapPanel``; the window
binds it, no presenter) with its widgets (``parts``: toolbar, canvas and footer), the drawing of a
source into the cells and the colour bar (``cells``), the hover read-out (``readout``), the display
options' derived sources held in the ledger (``derived``) and the canvas (``grid``). What it draws
is built without widgets in ``app/sources``."""
