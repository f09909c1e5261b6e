"""The pretrained (real checkpoint) mode and what only it uses: the mode itself (``mode``), the
models it offers and the folder dialogs (``folders``), its widgets (``widgets``) and File menu
exports (``exports``), its layer × head grid (``grid``, painted by ``painting``, which also exports
it) and controls (``controls``), the local model browser (``local_models``), what an ablation
changed (``ablation``), and the part of a real model's run the whole-run tabs read (``parts``).
"""
