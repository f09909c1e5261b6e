"""Everything only the pretrained (real checkpoint) mode uses: the mode itself (``mode``), the
models it offers and the folder dialogs (``folders``), its widgets (``widgets``) and File menu
exports (``exports``), its layer × head grid (``grid``, painted by ``painting``, which also exports it) and controls
(``controls``), the generation stepper tab (``generate``), the local model browser
(``local_models``), what an ablation changed (``ablation``), and the helpers the shared teaching
tabs call for a real model's parts (``parts``) and one layer's stages (``steps``).

The interpretability tabs of a real model: ``patching`` (activation patching),
``attribution`` (input attributions), ``logit_lens`` (each layer's residual stream read by the
unembedding), and ``interp`` (what those three share).
"""
