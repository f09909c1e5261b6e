"""The Rollout tab (a real model: rollout, flow, follow a token): its view (``view``) and presenter
(``presenter``)."""
