"""Every tab of the window, one folder per tab holding its view (``view``) and its presenter
(``presenter``), and what they all share.

``registry`` declares every tab once (``TabSpec``, ``TABS``, ``DOCK_TABS``); ``presenter`` is the one
presenter base (``TabPresenter``: refresh when shown, the view's holdings in the memory ledger);
``interp`` what the next-token tabs share (``InterpPresenter``: a job on request with progress and
cancel; why a model does not apply).

The tabs: ``heatmaps`` (the heatmap panel), ``stepthrough``, ``positions``, ``headstats``,
``compare``, ``rollout``, ``online_softmax``, ``implementation`` (the timing dock's attndesk vs
PyTorch), ``kvlab`` (the KV cache tab), ``circuit``, ``image`` (a vision model's input), ``corpus``
(the corpus pass), ``train`` (the trainer), ``generate`` (the generation stepper), and the
interpretability tabs of a real model: ``patching``, ``attribution``, ``logit_lens``. A tab never
imports another tab's folder: what two tabs share is in ``app/widgets``.
"""
