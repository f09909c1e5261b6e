"""What an altered pretrained run (ablated heads, unscaled, a forced mask) changed, in the words
its family calls for: an encoder's sentence embedding (cosine to the normal run's), a decoder's or
encoder-decoder's next-token distribution (KL divergence and the top 5 before and after)."""

from __future__ import annotations

from attndesk.models import NextToken, PretrainedResult

TOP = 5


def top_change(before: NextToken, after: NextToken, k: int = TOP) -> str:
    """'1. 'the' 31.2% → 'a' 29.0% · 2. …': the k most probable next tokens, side by side by rank."""
    pairs = zip(before.top(k), after.top(k))
    return " · ".join(f"{rank}. {b!r} {pb:.1%} → {a!r} {pa:.1%}" for rank, ((b, pb), (a, pa)) in enumerate(pairs, 1))


def ablation_effect(run: PretrainedResult) -> str | None:
    """One line on how the altered run differs from the normal one; None for a normal run."""
    if not run.altered:
        return None
    if run.kl_to_normal is not None and run.normal_next is not None and run.next_token is not None:
        return f"next-token KL(normal ‖ altered) {run.kl_to_normal:.4g} nats · top {TOP} before → after: " + top_change(
            run.normal_next, run.next_token
        )
    if run.cosine_to_normal is not None:
        return f"cosine to the normal embedding {run.cosine_to_normal:.4f}"
    return run.next_token_off  # a checkpoint without its LM head: why there is no KL, else None


__all__ = ["TOP", "ablation_effect", "top_change"]
