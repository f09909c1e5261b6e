"""Teaching comparisons and cores over the toy model's runs (no Qt): what the window's teaching
tabs compute.

Modules: ``compare`` (B − A and the one-click pairs), ``diff`` (the differences of two runs),
``variant_compare`` (an attention variant beside the plain run), ``tutorial`` (padding without a
mask, checked), ``online_softmax`` (FlashAttention's walk, step by step), ``kv_cost`` (what a
decoder's K/V cache costs per variant), ``statistics`` (per-head entropy, distance, sinks) and
``rollout`` (attention rollout).
"""
