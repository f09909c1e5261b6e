"""Interpretability on a loaded model (``load_pretrained``): activation patching and its
first-order approximation, edge scores, path patching and circuits, input attributions, attention flow, the logit lens and direct logit
attribution. Pure functions returning dataclasses of numpy arrays with their labels; the long
ones take ``progress(fraction, message)`` and a ``cancel`` ``threading.Event`` and size their
batches against a memory budget in bytes. Nothing here imports Qt.

Modules: ``anatomy`` (where a model's layers and heads are), ``inputs`` (prompts, answers, metrics),
``attribution_patching`` (the first-order estimate), ``graph`` (the edge graph and its patched
engine), ``edges`` (edge scores, path patching), ``score_terms`` (a head's score split into terms),
``composition`` (weight-only views of a toy decoder's heads), ``image_maps`` (maps of a vision
transformer's evidence on the patch grid), ``map_faithfulness`` (how faithful such a map is: deletion,
insertion, the pointing game), ``registers`` (a vision transformer's registers and high-norm tokens)."""

from .attribution import (
    BASELINES,
    InputAttribution,
    StepAttribution,
    attention_x_gradient,
    gradient_x_input,
    gradient_x_input_report,
    integrated_gradients,
    integrated_gradients_report,
    step_attributions,
)
from .attribution_patching import AttributionPatchingReport, attribution_patching, rank_correlation
from .circuits import connected, faithfulness, faithfulness_curve, find_circuit, load_circuit, save_circuit
from .composition import composition_scores, head_weights, ov_copying_scores, qk_positional
from .edges import edge_scores, path_patching
from .flow import AttentionFlow, attention_flow
from .graph import edge_graph
from .lens import DirectLogitAttribution, LogitLens, direct_logit_attribution, logit_lens, unembedding
from .patching import SITES, PatchingReport, PatchingResult, activation_patching, patch_heads
from .score_terms import ScoreTerms, score_terms

__all__ = [
    "BASELINES",
    "SITES",
    "AttentionFlow",
    "AttributionPatchingReport",
    "DirectLogitAttribution",
    "InputAttribution",
    "LogitLens",
    "PatchingReport",
    "PatchingResult",
    "ScoreTerms",
    "StepAttribution",
    "activation_patching",
    "attention_flow",
    "attention_x_gradient",
    "attribution_patching",
    "composition_scores",
    "connected",
    "direct_logit_attribution",
    "edge_graph",
    "edge_scores",
    "faithfulness",
    "faithfulness_curve",
    "find_circuit",
    "gradient_x_input",
    "gradient_x_input_report",
    "head_weights",
    "integrated_gradients",
    "integrated_gradients_report",
    "load_circuit",
    "logit_lens",
    "ov_copying_scores",
    "patch_heads",
    "path_patching",
    "qk_positional",
    "rank_correlation",
    "save_circuit",
    "score_terms",
    "step_attributions",
    "unembedding",
]
