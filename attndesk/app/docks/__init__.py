"""The window's docks, one concern per module.

- ``tokens``: the input text, the cross-attention text and the tokens as the core saw them.
- ``parameters`` and ``variant_controls``: the model parameters, one control per field of the spec.
- ``timing``: the last run's stage timings, recent runs and totals.
"""
