"""Edge circuits (attndesk.interp.edges / circuits): faithfulness, agreement and speed.

    .venv/bin/python benchmarks/bench_circuits.py [--pairs 64] [--steps 300] [--quick]

1. The shipped induction presets (2 layers x 4 heads, attention only): ``induction-sparse`` (the
   figure's model: trained with a group-lasso penalty on heads, ``head_l1``, so one head pair does
   the work) and ``induction`` (induction spread over every head, for comparison). 16
   clean/corrupted pairs of ``[BOS, s_1..s_6, s_1..s_4]`` against ``[BOS, r_1..r_6, s_1..s_4]``
   (the first occurrence of the repeated segment replaced by other tokens; answer s_5, wrong r_5).
   Each preset's accuracy and its heads' previous-token and induction scores (the head detector of
   ``attndesk.corpus.metrics``) with each head's OV weight norm; circuits of at most 10% of the
   edges chosen by exact, EAP, EAP-IG (top-n by |score|, and top-n of the edges on
   embed-to-logits paths) and ACDC, each with its faithfulness, the random baseline at that size
   (10 draws) and whether it holds the key-input edge from the strongest previous-token head to
   the strongest induction head; beside them circuits built by hand from the induction mechanism.
2. EAP and EAP-IG (5 steps, both variants) against exact over every edge: Spearman, on models of
   four tasks (induction, reverse, copy, needle; presets and models trained here, 2 x 4 and
   4 x 8), against exact patching in both directions: clean-into-corrupt (the table's own scores),
   and removal (each edge alone corrupted in the clean run, the direction EAP-IG's reference code
   patches), signed and by |score|, and against the mean of the two directions. The figure's
   4 x 8 row (``FIGURE_MODEL``: reverse, learned positions, 600 steps, weight decay 0.1)
   trained with seeds 0, 1 and 2, on two pair seeds at 16 and 64 pairs, with the verdict.
3. Time on the 4 x 8 model: EAP-IG over ``--pairs`` prompt pairs (target under 60 s), exact edge
   patching of every edge (8 pairs), and one plain forward per edge and pair as the baseline
   (the median of 50 single-prompt forwards at the better of 1 and 2 threads, times the runs).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from attndesk.corpus.metrics import batch_metrics  # noqa: E402
from attndesk.interp import edge_scores, faithfulness, faithfulness_curve, find_circuit  # noqa: E402
from attndesk.interp.attribution_patching import rank_correlation  # noqa: E402
from attndesk.interp.edges import prepare, run_rows  # noqa: E402
from attndesk.jobs import JobContext  # noqa: E402
from attndesk.system.threads import torch_threads  # noqa: E402
from attndesk.train import TrainConfig, train  # noqa: E402
from attndesk.train.presets import load_preset  # noqa: E402


def induction_pairs(vocab: int, count: int, seed: int, n: int = 6, k: int = 4):
    rng = np.random.default_rng(seed)
    clean, corrupt, answer, wrong = [], [], [], []
    for _ in range(count):
        tokens = rng.permutation(np.arange(1, vocab))[: 2 * n]
        s, r = [int(t) for t in tokens[:n]], [int(t) for t in tokens[n:]]
        clean.append([0, *s, *s[:k]])
        corrupt.append([0, *r, *s[:k]])
        answer.append(s[k])
        wrong.append(r[k])
    return clean, corrupt, answer, wrong


def strongest_heads(run, clean) -> tuple[str, str]:
    """(the layer-0 head that attends most to the previous token, the layer-1 head with the best
    induction score on the task's own batch)."""
    weights = run.attention(torch.tensor(clean))  # [B, layers, H, L, L]
    previous = weights[:, 0].diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))  # [H]
    scores = run.evaluate(run.task.sample(256, torch.Generator().manual_seed(0)))["scores"]
    return f"L0.H{int(previous.argmax())}", f"L1.H{int(np.argmax(scores[1]))}"


def head_table(run, clean) -> list[str]:
    """Each head's previous-token and induction score on the pairs' clean prompts (the corpus
    head detector, TransformerLens' mul measure) and the norms of its value and output weights."""
    ids = torch.tensor(clean)
    weights = run.attention(ids)  # [B, layers, H, L, L]
    full = torch.ones(ids.shape, dtype=torch.bool)
    lines = ["| head | previous-token score | induction score | norm of V rows, O columns |", "|---|---:|---:|---|"]
    for layer in range(run.cfg.layers):
        scores = batch_metrics(weights[:, layer], full, full, ids)
        attn = run.model.blocks[layer].attn
        d = attn.head_dim
        for h in range(run.cfg.heads):
            v = float(attn.v_proj.weight[h * d : (h + 1) * d].detach().norm())
            o = float(attn.out_proj.weight[:, h * d : (h + 1) * d].detach().norm())
            lines.append(
                f"| L{layer}.H{h} | {np.nanmean(scores['previous_token_score'][:, h]):.3f} | "
                f"{np.nanmean(scores['induction_score'][:, h]):.3f} | {v:.2f}, {o:.2f} |"
            )
    return lines


def circuits_on_preset(name: str, quick: bool) -> list[str]:
    run = load_preset(name)
    pairs = induction_pairs(run.cfg.vocab, 16, seed=0)
    exact = edge_scores(run, *pairs, method="exact")
    ig = edge_scores(run, *pairs, method="eap-ig", steps=5)
    size = int(0.1 * len(exact))
    previous, induction = strongest_heads(run, pairs[0])
    key_edge = (previous, induction, "k")
    metrics = run.evaluate(run.task.sample(256, torch.Generator().manual_seed(0)))
    lines = [
        f"### 1. Preset {name}: circuits of at most 10% of the edges ({size} of {len(exact)})",
        "",
        f"Accuracy {metrics['accuracy']:.3f}, best induction pattern score {metrics['pattern']:.3f} (256 "
        f"sequences of the task); 16 pairs; clean logit difference {exact.attrs['clean_metric']:.3f}, corrupted "
        f"{exact.attrs['corrupt_metric']:.3f}; strongest previous-token head {previous}, induction head {induction}.",
        "",
        *head_table(run, pairs[0]),
        "",
        "| circuit | edges | faithfulness | random at that size: mean ± std (min, max) | holds "
        f"{previous} -> {induction} (k) |",
        "|---|---:|---:|---|---|",
    ]
    eap = edge_scores(run, *pairs, method="eap")
    chosen = {}
    for label, table in (("exact", exact), ("EAP", eap), ("EAP-IG", ig)):
        chosen[f"{label} top-n"] = find_circuit(table, top_n=size)
        chosen[f"{label} top-n, connected"] = find_circuit(table, top_n=size, prune=True)
    if not quick:
        for tau in (0.5, 1.0, 2.0):
            start = time.perf_counter()
            kept = find_circuit(
                ig,
                threshold=tau,
                method="acdc",
                model=run,
                clean=pairs[0],
                corrupt=pairs[1],
                answer=pairs[2],
                wrong=pairs[3],
            )
            chosen[f"ACDC tau {tau} ({time.perf_counter() - start:.0f} s)"] = kept
    # by hand: each induction head's key input from the previous-token head(s), its value input
    # from the embeddings, its write to the logits, and the previous-token heads' value inputs
    layer0 = [f"L0.H{h}" for h in range(run.cfg.heads)]
    layer1 = [f"L1.H{h}" for h in range(run.cfg.heads)]
    for heads, senders in (([induction], [previous]), (layer1, [previous]), (layer1, layer0)):
        circuit: set[tuple[str, str, str]] = set()
        for head in heads:
            circuit |= {(head, "logits", "logits"), ("embed", head, "v")} | {(p, head, "k") for p in senders}
        circuit |= {("embed", p, "v") for p in senders}
        chosen[f"by hand: {len(heads)} induction head(s), {len(senders)} previous-token head(s)"] = circuit
    for label, circuit in chosen.items():
        n = len(circuit)
        curve = faithfulness_curve(run, exact, *pairs, sizes=[n], draws=10)
        value = faithfulness(run, circuit, *pairs)
        row = curve.iloc[0]
        lines.append(
            f"| {label} | {n} | {value:.3f} | {row.random_mean:.3f} ± {row.random_std:.3f} "
            f"({row.random_min:.3f}, {row.random_max:.3f}) | {'yes' if key_edge in circuit else 'no'} |"
        )
    curve = faithfulness_curve(run, exact, *pairs, draws=10)
    lines += [
        "",
        "Faithfulness curve of the exact ranking (every size):",
        "",
        "| edges | share | top-n | random mean ± std |",
        "|---:|---:|---:|---|",
    ]
    for row in curve.itertuples():
        lines.append(
            f"| {row.size} | {row.fraction:.1%} | {row.faithfulness:.3f} | {row.random_mean:.3f} ± {row.random_std:.3f} |"
        )
    return [*lines, ""]


def transduce_pairs(run, count: int, seed: int, done: int = 3):
    """Copy / reverse: ``[BOS, x_1..x_n, SEP, y_1..y_done]`` (the answer's first ``done`` tokens
    written) against the same with the source of y_(done+1) replaced; answer that source, wrong
    its replacement."""
    n, vocab = run.task.n, run.cfg.vocab
    rng = np.random.default_rng(seed)
    clean, corrupt, answer, wrong = [], [], [], []
    for _ in range(count):
        x = [int(t) for t in rng.integers(2, vocab, n)]
        y = x[::-1] if run.cfg.task == "reverse" else x
        source = n - 1 - done if run.cfg.task == "reverse" else done
        other = int(rng.choice([t for t in range(2, vocab) if t != x[source]]))
        changed = [*x[:source], other, *x[source + 1 :]]
        clean.append([0, *x, 1, *y[:done]])
        corrupt.append([0, *changed, 1, *y[:done]])
        answer.append(x[source])
        wrong.append(other)
    return clean, corrupt, answer, wrong


def needle_pairs(run, count: int, seed: int):
    """Needle: the task's sequences up to the query ``SEP k`` against the same with the needle's
    v_1 replaced; answer v_1, wrong its replacement."""
    task, vocab = run.task, run.cfg.vocab
    batch = task.sample(count, torch.Generator().manual_seed(seed))
    where = task.needle_positions(batch)
    rng = np.random.default_rng(seed)
    clean, corrupt, answer, wrong = [], [], [], []
    for i in range(count):
        ids = [int(t) for t in batch.ids[i, : run.cfg.length - task.VALUE_TOKENS]]
        k = int(where[i])
        other = int(rng.choice([t for t in range(2, vocab) if t not in (ids[k], ids[k + 1])]))
        clean.append(ids)
        corrupt.append([*ids[: k + 1], other, *ids[k + 2 :]])
        answer.append(ids[k + 1])
        wrong.append(other)
    return clean, corrupt, answer, wrong


def task_pairs(run, count: int, seed: int):
    if run.cfg.task == "induction":
        return induction_pairs(run.cfg.vocab, count, seed)
    if run.cfg.task == "needle":
        return needle_pairs(run, count, seed)
    return transduce_pairs(run, count, seed)


AGREEMENT_HEADER = [
    "| model | edges | exact (s) | estimate | clean-into-corrupt | by abs | removal | by abs | mean of both | time (s) |",
    "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
]


def agreement(name: str, run, pairs) -> tuple[list[str], dict[str, float]]:
    """Rows of the agreement table: Spearman of each estimate with exact clean-into-corrupt
    patching (signed, and |estimate| with |exact|), with exact removal (the same sign convention:
    m_clean - m(the edge corrupted); and by abs) and with the mean of the two directions; and
    each estimate's signed Spearman with clean-into-corrupt (the figure's measure) by label."""
    start = time.perf_counter()
    exact = edge_scores(run, *pairs, method="exact").score.to_numpy()
    exact_s = time.perf_counter() - start
    removal = removal_scores(run, pairs)
    both = 0.5 * (exact + removal)
    lines = [
        f"| {name} | {len(exact):,} | {exact_s:.1f} | exact removal | {rank_correlation(removal, exact):.3f} | "
        f"{rank_correlation(np.abs(removal), np.abs(exact)):.3f} | 1 | 1 | | |"
    ]
    signed = {}
    for method, options in (("eap", {}), ("eap-ig", {"ig": "inputs"}), ("eap-ig", {"ig": "activations"})):
        start = time.perf_counter()
        score = edge_scores(run, *pairs, method=method, steps=5, **options).score.to_numpy()
        seconds = time.perf_counter() - start
        label = "EAP" if not options else f"EAP-IG, {options['ig']}"
        signed[label] = rank_correlation(score, exact)
        lines.append(
            f"| {name} | | | {label} | {rank_correlation(score, exact):.3f} | "
            f"{rank_correlation(np.abs(score), np.abs(exact)):.3f} | {rank_correlation(score, removal):.3f} | "
            f"{rank_correlation(np.abs(score), np.abs(removal)):.3f} | {rank_correlation(score, both):.3f} | {seconds:.2f} |"
        )
    return lines, signed


def removal_scores(run, pairs) -> np.ndarray:
    """Each edge's exact effect the other way round: m_clean - m(the clean run with that one edge
    carrying its sender's corrupted term), in the order of ``edge_scores``."""
    setup = prepare(run, *pairs, "logit_diff", target=None, memory_budget=None)
    edges = list(setup.engine.graph.index().values())
    count = setup.pairs.count
    specs = [(p, e) for e in edges for p in range(count)]
    values = run_rows(setup, specs, base="clean", alpha=0.0, ctx=JobContext(), label="removal")
    return (setup.m_clean.numpy()[None, :] - values.reshape(len(edges), count)).mean(axis=1)


def trained(
    task: str,
    steps: int,
    layers: int = 4,
    heads: int = 8,
    position: str = "rope",
    weight_decay: float = 0.01,
    seed: int = 0,
):
    cfg = TrainConfig(
        task=task,
        seed=seed,
        steps=steps,
        layers=layers,
        heads=heads,
        embed_dim=64,
        position=position,
        weight_decay=weight_decay,
    )
    start = time.perf_counter()
    run = train(cfg, threads=1)
    metrics = run.evaluate(run.task.sample(256, torch.Generator().manual_seed(0)))
    return run, time.perf_counter() - start, metrics


# the figure's 4 x 8 model: reverse, learned positions, attention only, AdamW weight decay 0.1
FIGURE_MODEL = {"task": "reverse", "steps": 600, "position": "learned", "weight_decay": 0.1}


def figure_row(quick: bool) -> list[str]:
    """The 4 x 8 row of the EAP-IG figure: ``FIGURE_MODEL`` trained with seeds 0, 1 and 2, EAP
    and EAP-IG against exact over every edge on two pair seeds, at 16 and 64 pairs (seeds 1 and
    2: 64 only); met where EAP-IG (inputs) has signed Spearman at least 0.9 with
    clean-into-corrupt on both pair seeds of a pair count, for every model."""
    counts = (8,) if quick else (16, 64)
    lines = [
        f"### 2b. The figure's 4 x 8 model: {FIGURE_MODEL}",
        "",
        *AGREEMENT_HEADER,
    ]
    notes, figures = [], {}
    for seed in (0,) if quick else (0, 1, 2):
        run, train_s, metrics = trained(
            FIGURE_MODEL["task"],
            FIGURE_MODEL["steps"],
            position=FIGURE_MODEL["position"],
            weight_decay=FIGURE_MODEL["weight_decay"],
            seed=seed,
        )
        notes.append(f"seed {seed}: trained in {train_s:.0f} s, accuracy {metrics['accuracy']:.3f}")
        for count in counts if seed == 0 else counts[-1:]:
            for pair_seed in (0, 1):
                name = f"seed {seed}, {count} pairs (pair seed {pair_seed})"
                rows, signed = agreement(name, run, task_pairs(run, count, seed=pair_seed))
                lines += rows
                figures.setdefault(count, []).append(signed["EAP-IG, inputs"])
    lines += ["", *notes, ""]
    for count, values in figures.items():
        verdict = "met" if min(values) >= 0.9 else "NOT met"
        lines.append(
            f"EAP-IG (inputs) against clean-into-corrupt, signed, {count} pairs: {verdict} "
            f"(lowest {min(values):.3f} of {len(values)})"
        )
    return [*lines, ""]


def speed(run, pairs_count: int) -> list[str]:
    pairs = induction_pairs(run.cfg.vocab, pairs_count, seed=1)
    start = time.perf_counter()
    table = edge_scores(run, *pairs, method="eap-ig", steps=5)
    ig_s = time.perf_counter() - start
    few = tuple(p[:8] for p in pairs)
    start = time.perf_counter()
    exact = edge_scores(run, *few, method="exact")
    exact_s = time.perf_counter() - start
    ids = torch.tensor(few[1][:1])
    run.model.eval()
    best = []
    for count in (1, 2):  # the baseline at its best thread count
        times = []
        with torch.no_grad(), torch_threads(count):
            for _ in range(50):
                t = time.perf_counter()
                run.model(ids)
                times.append(time.perf_counter() - t)
        best.append(statistics.median(times))
    one = min(best)
    naive = one * len(exact) * len(few[0])
    return [
        f"### 3. Speed on the 4 x 8 model ({len(table)} edges)",
        "",
        "| what | time (s) |",
        "|---|---:|",
        f"| EAP-IG (5 steps, inputs) over {pairs_count} pairs | {ig_s:.1f} |",
        f"| exact, every edge, {len(few[0])} pairs ({len(exact) * len(few[0]):,} patched runs) | {exact_s:.1f} |",
        f"| one plain forward per edge and pair (median single forward {one * 1e3:.2f} ms x runs) | {naive:.1f} |",
        "",
        f"EAP-IG over {pairs_count} pairs under 60 s: {'met' if ig_s < 60 else 'NOT met'} ({ig_s:.1f} s). "
        f"Exact edge patching against one forward per edge: {naive / exact_s:.1f}x faster.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300, help="training steps of the 4 x 8 model")
    parser.add_argument("--quick", action="store_true", help="no ACDC, fewer pairs (a smoke run)")
    args = parser.parse_args()
    print(
        f"# bench_circuits, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}\n"
    )
    for name in ("induction-sparse", "induction"):
        for line in circuits_on_preset(name, args.quick):
            print(line, flush=True)
    count = 8 if args.quick else 16
    models = []
    for name in ("induction", "induction-sparse", "reverse", "needle"):
        models.append((f"preset {name} (2 x 4)", load_preset(name)))
    notes = []
    for task, steps, layers, heads, position in (
        ("copy", 400, 2, 4, "learned"),
        ("induction", args.steps, 4, 8, "rope"),
        ("reverse", 400, 4, 8, "learned"),
    ):
        run, train_s, metrics = trained(task, steps, layers, heads, position)
        name = f"{task}, {layers} x {heads}, trained here"
        notes.append(
            f"{name}: {steps} steps ({position}) in {train_s:.0f} s, accuracy {metrics['accuracy']:.3f}, "
            f"pattern {metrics['pattern']:.3f}"
        )
        models.append((name, run))
    print(f"### 2. Agreement with exact over every edge (Spearman; {count} pairs)", "", *AGREEMENT_HEADER, sep="\n")
    for name, run in models:
        print(*agreement(name, run, task_pairs(run, count, seed=0))[0], sep="\n", flush=True)
    print("", *notes, "", sep="\n", flush=True)
    for line in figure_row(args.quick):
        print(line, flush=True)
    run = next(r for n, r in models if n.startswith("induction, 4 x 8"))
    for line in speed(run, 8 if args.quick else args.pairs):
        print(line, flush=True)


if __name__ == "__main__":
    main()
