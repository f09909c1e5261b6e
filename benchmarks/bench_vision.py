"""Benchmark: the vision presets' training time, how faithful each image map is, and where the
DINOv2 models' patches look (registers, high-norm tokens).

    .venv/bin/python benchmarks/bench_vision.py [--images 40] [--skip-train] [--skip-faithfulness]
        [--skip-registers] [--presets digits-vit shapes-vit]

0. Training time: the digits-vit preset's spec trained from its seed on 2 threads, then on 1:
   wall-clock and CPU seconds and the test accuracy reached. Target: at least 95% test accuracy
   within 3 minutes on 2 cores.
1. Faithfulness (attndesk.interp.map_faithfulness), on the first --images test images of the
   digits-vit and shapes-vit presets (opened by load_pretrained): deletion and insertion AUC
   (patches removed from / put back onto a grey image, the normalised 0, one patch at a time, in
   each map's order; the score is the probability of the class predicted on the whole image)
   and, on the shapes, the pointing game against the drawn mask. Maps (attndesk.interp.
   image_maps, explaining the predicted class): the last layer's class-token attention (heads
   averaged), rollout, attention flow, gradient rollout, attention x gradient, integrated
   gradients (8 Gauss-Legendre steps); beside them a seeded random map, and on the shapes the mask itself.
2. Registers (attndesk.interp.registers): on the shapes-dinov2-registers and shapes-dinov2
   presets, per layer and head, the mean weight a patch puts on each register, on the class
   token and on the one patch it attends to most; and the tokens whose output norm is more than
   twice the layer's median patch norm, counted over the images.

Prints Markdown tables with the date, the machine and the load average (other processes share
the CPU: say so next to the figures).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from collections import Counter

import numpy as np
import torch

from attndesk.interp.image_maps import (
    attention_gradients,
    chefer_map,
    flow_map,
    grad_rollout_map,
    head_maps,
    integrated_gradients_map,
    rollout_map,
)
from attndesk.interp.map_faithfulness import curve_auc, deletion_curve, insertion_curve, patch_mask, pointing_hit
from attndesk.interp.registers import vision_registers
from attndesk.models import load_pretrained, run_pretrained
from attndesk.models.vision import pixel_values, read_image
from attndesk.train.images.presets import VISION_PRESETS, preset_folder
from attndesk.train.images.trainer import evaluation_set, predict, train_vision

IG_STEPS = 8  # Gauss-Legendre nodes; each is a forward and backward pass, most of the cost per image


def _maps(model, image) -> dict[str, np.ndarray]:
    """Every image map of attndesk.interp.image_maps for one image, explaining the predicted class."""
    result = run_pretrained(model, image)
    gradients = attention_gradients(model, image)
    return {
        "class-token attention (last layer)": head_maps(result, result.weights.shape[0] - 1, query=0).mean(axis=0),
        "rollout": rollout_map(result),
        "attention flow": flow_map(result),
        "gradient rollout": grad_rollout_map(result, gradients),
        "attention x gradient": chefer_map(result, gradients),
        f"integrated gradients ({IG_STEPS} steps)": integrated_gradients_map(model, image, steps=IG_STEPS).map,
    }


def _header() -> None:
    load = os.getloadavg()
    print(f"# bench_vision, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (the CPU is shared: timings move with it)\n")


def training_time() -> None:
    print("## Training digits-vit from its seed\n")
    print("| threads | wall s | CPU s | test accuracy |")
    print("|---|---|---|---|")
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            run = train_vision(VISION_PRESETS["digits-vit"])
            print(
                f"| {threads} | {run.seconds['wall']:.1f} | {run.seconds['cpu']:.1f} | {run.accuracy:.4f} |", flush=True
            )
    finally:
        torch.set_num_threads(before)
    print()


def faithfulness(name: str, images: int) -> None:
    model = load_pretrained(preset_folder(name))
    data = evaluation_set(VISION_PRESETS[name])
    count = min(images, len(data))
    rng = np.random.default_rng(0)
    pointing = data.masks is not None
    rows: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    for i in range(count):
        image = data.images[i]
        one = pixel_values(model, read_image(image))
        target = int(predict(model.model, one).argmax())

        def score(batch: np.ndarray, target: int = target) -> np.ndarray:
            return predict(model.model, torch.from_numpy(batch))[:, target].numpy()

        maps = _maps(model, image)
        grid = next(iter(maps.values())).shape
        maps["random (seeded)"] = rng.random(grid)
        if data.masks is not None:
            maps["the drawn mask"] = patch_mask(data.masks[i], grid)
        for label, saliency in maps.items():
            row = rows.setdefault(label, {"deletion": [], "insertion": [], "pointing": []})
            row["deletion"].append(curve_auc(deletion_curve(score, one[0].numpy(), saliency)))
            row["insertion"].append(curve_auc(insertion_curve(score, one[0].numpy(), saliency)))
            if data.masks is not None:
                row["pointing"].append(float(pointing_hit(saliency, data.masks[i])))
    print(f"## Faithfulness on {name} ({count} test images, {time.perf_counter() - start:.0f} s)\n")
    print(
        "| map | deletion AUC (lower is better) | insertion AUC (higher is better) |"
        + (" pointing game |" if pointing else "")
    )
    print("|---|---|---|" + ("---|" if pointing else ""))
    for label, values in rows.items():
        cells = [f"{np.mean(values['deletion']):.3f}", f"{np.mean(values['insertion']):.3f}"]
        if pointing:
            cells.append(f"{np.mean(values['pointing']):.2f}")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    print()


def registers(images: int) -> None:
    for name in ("shapes-dinov2-registers", "shapes-dinov2"):
        model = load_pretrained(preset_folder(name))
        data = evaluation_set(VISION_PRESETS[name])
        count = min(images, len(data))
        shares, outliers = [], Counter()
        for i in range(count):
            share, high = vision_registers(run_pretrained(model, data.images[i]))
            shares.append(share)
            for layer, token, _, _ in high.outliers:
                outliers[(layer, token if token.startswith("[") else "a patch")] += 1
        names = shares[0].register_names
        reg = np.mean([s.registers for s in shares], axis=0)
        cls = np.mean([s.cls for s in shares], axis=0)
        top = np.mean([s.top_patches for s in shares], axis=0)
        print(f"## Where the patches look: {name} ({count} test images)\n")
        print("| layer | head | " + "".join(f"{n} | " for n in names) + "[CLS] | top patch |")
        print("|---|---|" + "---|" * len(names) + "---|---|")
        for layer in range(reg.shape[0]):
            for head in range(reg.shape[1]):
                cells = [f"{v:.3f}" for v in reg[layer, head]] + [f"{cls[layer, head]:.3f}", f"{top[layer, head]:.3f}"]
                print(f"| {layer} | {head} | " + " | ".join(cells) + " |")
        found = ", ".join(f"layer {layer}: {n} x {kind}" for (layer, kind), n in sorted(outliers.items()))
        print(f"\nTokens with norm > 2x the median patch's, over the {count} images: {found or 'none'}\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=40, help="test images per model (default 40)")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-faithfulness", action="store_true")
    parser.add_argument("--skip-registers", action="store_true")
    parser.add_argument(
        "--presets", nargs="+", default=["digits-vit", "shapes-vit"], help="the presets whose maps are measured"
    )
    args = parser.parse_args()
    _header()
    if not args.skip_train:
        training_time()
    if not args.skip_faithfulness:
        for name in args.presets:
            faithfulness(name, args.images)
    if not args.skip_registers:
        registers(args.images)


if __name__ == "__main__":
    main()
