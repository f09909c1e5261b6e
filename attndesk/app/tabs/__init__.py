"""Presenters of the teaching tabs: each binds one view (``app/views``) to the state and the
published result, runs its heavy work as side jobs of the compute controller, and turns the
view's intents into state changes. A presenter touches only its own view.

``kvlab`` presents the KV cache tab, ``circuit`` the Circuit tab, ``image`` the Image tab.

``base`` is what every presenter shares and ``registry`` declares every tab once. The teaching
tabs: ``stepthrough``, ``positions``, ``headstats``, ``compare``, ``implementation`` (the timing
dock's attndesk vs PyTorch), ``rollout``, ``online_softmax``; and ``corpus`` (the corpus pass) and
``train`` (the trainer).
"""
