"""Teaching views, each a standalone QWidget with setters and signals (tabs of the main window).

- ``stepthrough.StepThroughView``: one head's computation as a strip of heatmaps (needs intermediates).
- ``positional.PositionalView``: the sinusoidal encoding and its PE . PE^T similarity.
- ``headstats.HeadStatsView``: sortable per-head statistics + entropy-vs-distance scatter.
- ``compare.CompareView``: pin A, current B, B - A; one-click teaching comparisons.
- ``implementation.ImplementationPanel``: attndesk vs torch SDPA vs nn.MultiheadAttention timings and differences.
- ``rollout.RolloutView``: pretrained mode: attention rollout across layers and "follow a token".
- ``kvlab.KVLabView``: the KV cache tab: a policy's compressed run and a sweep of budgets.
- ``circuit.CircuitView``: the Circuit tab: edge scores, a circuit's faithfulness, a head's score terms.
- ``image_view``: the Image tab: a vision model's input image and its attention drawn over it.
- ``empty_state.EmptyStatePage``: the page a tab shows when it does not apply to the model or mode on screen.
- ``heatmap.MatrixPlot``: the labelled matrix every view draws with.

A view never imports another view (``heatmap`` is their shared widget) nor a mode; the presenters
in ``app/tabs`` connect them to the window's state and results.

Also: ``generate`` (the generation stepper), ``patching``, ``attribution`` and ``logit_lens``
(the interpretability views, with ``interp_widgets``), ``online_softmax``, ``corpus`` and
``train`` (packages: view, controls or form, plots or curves); what they share: ``stages`` (what the
step-through shows, without widgets), ``pacing`` (pages of plots painted a piece per turn),
``plot_axes``, ``table_items`` and ``kvcache_table``.
"""
