"""Expected attention (Devoto et al. 2025): the attention future queries are expected to pay.

From the prompt's queries before the rotary embedding (positions ``sinks``..P-1): their mean mu and
covariance S per query head; R the rotation averaged over the next ``future`` positions (identity
without a rotary embedding); score of key k (a head's softmax over the non-sink keys, then the
group's mean) = softmax_j(k_j . R mu / sqrt(d) + k_j^T R S R^T k_j / (2 d)), times ||v_j|| with
``vnorm``; the first ``sinks`` keys are kept first. kvpress's ``ExpectedAttentionPress``
(epsilon 0). A pretrained model's queries before the rotation are its rotated ones turned back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attndesk.errors import ConfigError
from attndesk.runs.fields import param

from .base import Policy, View


@dataclass(frozen=True)
class ExpectedOptions:
    future: int = param(512, kind=int, low=1, label="Future", tip="future positions averaged over", flag="--future")
    sinks: int = param(4, kind=int, low=0, label="Sinks", tip="first keys always kept", flag="--sinks")
    covariance: bool = param(
        True, kind=bool, label="Covariance", tip="use the queries' covariance", flag="--no-covariance"
    )
    vnorm: bool = param(True, kind=bool, label="Value norm", tip="weigh by the value's norm", flag="--no-vnorm")


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class ExpectedAttention(Policy):
    name = "expected_attention"
    title = "Expected attention"
    about = "the attention future queries are expected to pay, from the queries' statistics"
    kind = "prefill"
    options = ExpectedOptions

    def check(self, view: View, budget: int, opts: ExpectedOptions) -> None:
        if view.prompt <= opts.sinks:
            raise ConfigError(f"expected_attention keeps {opts.sinks} sinks: the prompt needs more tokens than that")
        rotary = view.model.rotary(0, 1)
        if rotary is not None and rotary[0].shape[-1] != view.model.head_dim:
            raise ConfigError("expected_attention needs a rotary embedding over the whole head (this one is partial)")

    def prefill_scores(self, view: View, opts: ExpectedOptions) -> np.ndarray:
        p, s = view.prompt, opts.sinks
        d = view.prefill.q[0].shape[-1]
        here = view.model.rotary(0, p)
        ahead = view.model.rotary(p, opts.future)
        rotation = np.eye(d)
        if ahead is not None:
            swap = np.zeros((d, d))
            swap[d // 2 :, : d // 2], swap[: d // 2, d // 2 :] = np.eye(d // 2), -np.eye(d // 2)
            cos, sin = ahead
            rotation = (cos[:, :, None] * np.eye(d) + sin[:, :, None] * swap).mean(0)
        out = []
        for q, k, v in zip(view.prefill.q, view.prefill.k, view.prefill.v):
            q64 = q.astype(np.float64)
            if here is not None:  # turn the rotation back: q_raw = q cos - rotate_half(q) sin
                q64 = q64 * here[0] - _rotate_half(q64) * here[1]
            q64 = q64[:, s:]
            mu = q64.mean(1)  # [H, d]
            keys = np.repeat(k[:, s:].astype(np.float64), q.shape[0] // k.shape[0], axis=0)  # [H, n, d]
            mu_r = mu @ rotation.T
            logits = np.einsum("hd,hnd->hn", mu_r, keys) / np.sqrt(d)
            if opts.covariance:
                centered = q64 - mu[:, None]
                cov = np.einsum("hsi,hsj->hij", centered, centered) / q64.shape[1]
                cov_r = rotation @ cov @ rotation.T
                logits = logits + np.einsum("hni,hij,hnj->hn", keys, cov_r, keys) / d / 2
            logits = logits - logits.max(-1, keepdims=True)
            weights = np.exp(logits)
            weights /= weights.sum(-1, keepdims=True)
            scores = weights.reshape(k.shape[0], -1, weights.shape[-1]).mean(1)
            if opts.vnorm:
                scores = scores * np.linalg.norm(v[:, s:].astype(np.float64), axis=-1)
            out.append(np.concatenate([np.full((k.shape[0], s), np.inf), scores], axis=-1))
        return np.stack(out)


POLICY = ExpectedAttention()
