"""``attndesk reproduce BUNDLE``: compute a bundle's run again and report the largest difference
from its weights (0 on the machine and versions that made it; elsewhere within a stated
tolerance), or name what is missing here (the model folder, a version)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE, CliError

NAME = "reproduce"
# float32 attention on another machine or torch build differs by rounding: measured below 1e-6
# for the packaged MiniLM between torch builds; 1e-5 leaves room and still catches a real change
TOLERANCE_ELSEWHERE = 1e-5
# a circuit's faithfulness is a float64 ratio of float32 runs: the same here; elsewhere rounding
# moves both metrics, and the ratio by more where the clean and corrupted metrics are close
CIRCUIT_TOLERANCE_ELSEWHERE = 1e-3


def register(sub: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        NAME,
        help="recompute a bundle and report the largest difference from its weights",
        description=(
            "Read a bundle written by 'attndesk bundle' (or the window's File > Save bundle), run it again "
            "with the same session and model, and compare: exit 0 when the weights agree (exactly on the "
            f"same machine and versions, within {TOLERANCE_ELSEWHERE:g} otherwise), 1 when they differ."
        ),
    )
    parser.add_argument("bundle", metavar="BUNDLE.zip", help="the bundle to reproduce")
    parser.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="the model folder, when it is no longer where the bundle says (its weights must hash the same)",
    )
    return parser


def _recompute(bundle, model_folder: str | None) -> tuple[dict, str]:
    """The bundle's arrays computed again here, and what computed them (in words)."""
    from attndesk.core import run_attention
    from attndesk.core.bundle import check_model, run_weights
    from attndesk.session.file import session_from_json

    state = session_from_json(bundle.session).state
    run = bundle.manifest.get("run") or {}
    identity = bundle.manifest.get("model") or {}
    if identity.get("kind") != "pretrained":
        if state.config.weights_from != "random":
            return _recompute_trained(bundle)
        result = run_attention(state.config, state.text, key_text=state.keys_text())
        return run_weights(result), "the toy model"
    try:
        import transformers  # noqa: F401  (a real model needs it: say so rather than fail inside)
    except ImportError:
        from attndesk.core.bundle import BundleError

        raise BundleError("the bundle's model needs the transformers package, which is not installed here") from None
    from attndesk.core.pretrained import load_pretrained, read_spec, run_pretrained

    folder = check_model(identity, model_folder)
    spec = read_spec(folder)
    # as the window's pretrained mode runs a state: a target only for an encoder-decoder, heads that exist
    target = state.target_text if spec.family == "encoder-decoder" and state.target_text.strip() else None
    ablate = tuple((l, h) for l, h in state.pretrained.ablate if l < spec.num_layers and h < spec.num_heads)
    model = load_pretrained(folder, memory_budget=run.get("memory_budget"))
    if run.get("image"):  # a vision run: its image, as the bundle stored it
        pretrained = run_pretrained(
            model, _bundled_image(bundle, str(run["image"])), memory_budget=run.get("memory_budget")
        )
        return run_weights(pretrained, run.get("layer")), f"the model in {folder} on the bundled image"
    pretrained = run_pretrained(
        model,
        state.text,
        target=target,
        ablate=ablate,
        scaled=state.config.scaled,
        causal="causal" in state.config.mask,
        memory_budget=run.get("memory_budget"),
    )
    return run_weights(pretrained, run.get("layer")), f"the model in {folder}"


def _bundled_image(bundle, name: str):
    """The RGB array of the bundle's input image ``name`` (inputs/NAME, a PNG)."""
    import io

    import numpy as np
    from PIL import Image

    from attndesk.core.bundle import BundleError

    data = bundle.inputs.get(name)
    if data is None:
        raise BundleError(f"the bundle's run used the image inputs/{name}, which is not in the bundle")
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except Exception as exc:  # PIL raises many kinds for a damaged file
        raise BundleError(f"the bundle's image inputs/{name} cannot be read: {exc}") from None


def _circuits(bundle, model_folder: str | None) -> list[tuple[str, float, float]]:
    """(name, bundled, recomputed) faithfulness of every circuit in the bundle, on its model."""
    from attndesk.core.bundle import BundleError, check_model

    if not bundle.circuits:
        return []
    from attndesk.core.interp import faithfulness
    from attndesk.core.pretrained import load_pretrained

    folder = check_model(bundle.manifest.get("model") or {}, model_folder)
    model = load_pretrained(folder, memory_budget=(bundle.manifest.get("run") or {}).get("memory_budget"))
    out = []
    for name, data in sorted(bundle.circuits.items()):
        try:
            document = json.loads(data)
            question, recorded = document["question"], float(document["faithfulness"])
            edges = {(a, b, c) for a, b, c in document["edges"]}
        except (ValueError, KeyError, TypeError):
            raise BundleError(f"the bundle's circuits/{name} is not a circuit with its question") from None
        value = faithfulness(
            model,
            edges,
            question["clean"],
            question["corrupt"],
            question["answer"],
            question.get("wrong"),
            metric=document.get("metric", "logit_diff"),
            target=question.get("target"),
        )
        out.append((name, recorded, float(value)))
    return out


def _recompute_trained(bundle) -> tuple[dict, str]:
    """A trained toy model's heads on the probe input again, from the model files the bundle carries."""
    import torch

    from attndesk.core.bundle import BundleError, run_weights
    from attndesk.core.errors import ConfigError
    from attndesk.train.stages import trained_result
    from attndesk.train.store import run_from_files

    trained = (bundle.manifest.get("model") or {}).get("trained")
    probe = (bundle.manifest.get("run") or {}).get("probe_ids")
    if not trained or not bundle.model_files or not probe:
        raise BundleError(
            "this bundle's trained toy weights were not saved with it (an older attndesk): save the bundle again"
        )
    try:
        model = run_from_files(bundle.model_files)
    except ConfigError as exc:
        raise BundleError(f"the bundle's trained model cannot be read: {str(exc).split(': ', 1)[-1]}") from None
    result = trained_result(model, trained["weights"], torch.tensor([probe], dtype=torch.int64))
    return run_weights(result), f"the bundled {trained['weights']} model ({trained['task']}, {model.step:,} steps)"


def run(args: argparse.Namespace) -> int:
    from attndesk.core.bundle import (
        BundleError,
        largest_difference,
        read_bundle,
        same_environment,
    )
    from attndesk.session.file import SessionError

    try:
        bundle = read_bundle(args.bundle)
        recomputed, what = _recompute(bundle, args.model)
        worst = largest_difference(bundle.weights, recomputed)
        circuits = _circuits(bundle, args.model)
    except SessionError as exc:
        raise CliError(f"{args.bundle}: its session cannot be used here: {exc}", EXIT_USAGE) from None
    except (BundleError, ValueError) as exc:  # ConfigError (a model that no longer loads) included
        raise CliError(str(exc), EXIT_USAGE) from None
    changes = same_environment(bundle.manifest)
    tolerance = TOLERANCE_ELSEWHERE if changes else 0.0
    print(f"recomputed {len(recomputed)} weight array(s) with {what}")
    if changes:
        print(f"made elsewhere ({'; '.join(changes)}): differences up to {tolerance:g} are rounding")
    else:
        print("made here, with these versions: the weights must agree exactly")
    print(f"largest difference from the bundled weights: {worst:.3g}")
    if worst > tolerance:
        raise CliError(
            f"the recomputed weights differ from the bundle's by {worst:.3g}, over the tolerance {tolerance:g}",
            EXIT_FAILURE,
        )
    off = CIRCUIT_TOLERANCE_ELSEWHERE if changes else 0.0
    for name, recorded, value in circuits:
        print(f"circuit {name}: faithfulness {value:.6g} (bundled {recorded:.6g})")
        if abs(value - recorded) > off:
            raise CliError(
                f"the circuit {name}'s faithfulness is {value:.6g} here, {recorded:.6g} in the bundle: "
                f"over the tolerance {off:g}",
                EXIT_FAILURE,
            )
    return 0
