"""What ``attndesk reproduce`` does once its flags are parsed (``cli.reproduce`` holds the flags and
the tolerances, and imports this module in its ``run``): the bundle's run computed again (the toy
model, a trained toy model from the files it carries, a model folder on its text or its image), the
largest difference from the bundled weights, and each bundled circuit's faithfulness again."""

from __future__ import annotations

import argparse
import io
import json

import numpy as np
import torch
from PIL import Image

from attndesk.cli.base import EXIT_FAILURE, EXIT_USAGE, CliError
from attndesk.errors import ConfigError
from attndesk.interp import faithfulness
from attndesk.models import load_pretrained, read_spec, run_pretrained
from attndesk.runs.pipeline import run_attention
from attndesk.session.bundle import (
    BundleError,
    check_model,
    largest_difference,
    read_bundle,
    run_weights,
    same_environment,
)
from attndesk.session.file import SessionError, session_from_json
from attndesk.train.stages import trained_result
from attndesk.train.store import run_from_files


def _recompute(bundle, model_folder: str | None) -> tuple[dict, str]:
    """The bundle's arrays computed again here, and what computed them (in words)."""
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
        raise BundleError("the bundle's model needs the transformers package, which is not installed here") from None
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
    if not bundle.circuits:
        return []
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


def reproduce_command(args: argparse.Namespace, tolerance_elsewhere: float, circuit_tolerance_elsewhere: float) -> int:
    """Exit 0 when the weights (and circuits) agree: exactly here, within the tolerances elsewhere."""
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
    tolerance = tolerance_elsewhere if changes else 0.0
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
    off = circuit_tolerance_elsewhere if changes else 0.0
    for name, recorded, value in circuits:
        print(f"circuit {name}: faithfulness {value:.6g} (bundled {recorded:.6g})")
        if abs(value - recorded) > off:
            raise CliError(
                f"the circuit {name}'s faithfulness is {value:.6g} here, {recorded:.6g} in the bundle: "
                f"over the tolerance {off:g}",
                EXIT_FAILURE,
            )
    return 0
