"""The window's panels, one concern per module.

- ``tokens``: the input text, the cross-attention text and the tokens as the core saw them.
- ``parameters`` and ``variant_controls``: the model parameters, one control per field of the spec.
- ``timing``: the last run's stage timings, recent runs and totals.
- ``heatmaps``: the per-head heatmap panel (``HeatmapPanel``), with its collaborators
  ``heatmap_parts`` (toolbar, canvas and footer widgets), ``heatmap_cells`` (drawing a source into
  the cells and the colour bar), ``heatmap_readout`` (the hover read-out), ``heatmap_derived``
  (the display options' derived sources and their memory holding), ``heatmap_grid`` (the canvas)
  and ``token_axis`` (token-labelled axes).
"""
