"""Corpus pass figures, measured side by side in one run (``make bench-corpus``; docs/corpus.md).

1. speed: the corpus pass (statistics, atlas sample, shards, compaction) against a plain
   transformers eager forward with ``output_attentions=True`` in batches of 32, no statistics, over
   the same texts: all-MiniLM-L6-v2 at 64 tokens on 2,000 texts (``--texts``);
2. scale: peak RSS of ``attndesk corpus`` per tenth of the corpus and during compaction (the tiny
   random BERT of tests/pretrained_models.py, 20,000 texts; ``--full``: 100,000), and resume after
   ``kill -9`` at random moments, compared with an uninterrupted run;
3. atlas: PCA of every MiniLM head over 50,000 points each (25,000 queries + 25,000 keys);
4. Ray: the same store from 2 workers as from the local engine, and a scaling table for 1-8
   workers simulated from the measured actor start-up, shard and driver times.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from attndesk import set_torch_environment  # noqa: E402

set_torch_environment()  # before torch loads: importing attndesk sets nothing

import pandas as pd  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402

from attndesk.corpus import analyze_corpus  # noqa: E402

SAMPLE = ROOT / "attndesk" / "resources" / "corpus_sample.txt"


def corpus_texts(n: int, seed: int = 0) -> list[str]:
    """n texts of one to three sample lines each (about 20-70 MiniLM tokens)."""
    lines = [line for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(seed)
    return [" ".join(rng.sample(lines, rng.randint(1, 3))) for _ in range(n)]


def eager_baseline(texts: list[str], max_tokens: int) -> float:
    """Seconds for transformers' eager forward with output_attentions=True, batches of 32."""
    import transformers

    from attndesk.models import packaged_model_dir

    folder = packaged_model_dir()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(texts), 32):
            batch = tok(texts[i : i + 32], padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
            out = model(**batch, output_attentions=True)
            assert len(out.attentions) == 6
    return time.perf_counter() - start


def speed(n: int, work: Path) -> dict:
    texts = corpus_texts(n)
    analyze_corpus(texts[:64], work / "warm", max_tokens=64)  # loads the model and warms both paths
    eager_baseline(texts[:64], 64)
    marks: dict[str, float] = {}

    def progress(p) -> None:
        marks.setdefault(p.stage, time.perf_counter())

    base = eager_baseline(texts, 64)
    start = time.perf_counter()
    analyze_corpus(texts, work / "speed", max_tokens=64, progress=progress)
    total = time.perf_counter() - start
    passed = marks.get("compacting", start + total) - start
    return {
        "texts": n,
        "eager_s": base,
        "pass_s": passed,
        "total_s": total,
        "pass_ratio": passed / base,
        "total_ratio": total / base,
        "texts_per_s": n / total,
    }


def _cli(data: Path, out: Path, model: Path | None, extra: tuple = ()) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "attndesk.cli",
        "corpus",
        "--data",
        str(data),
        "--out",
        str(out),
        "--max-tokens",
        "64",
        "--atlas-points",
        "500",
        *extra,
    ] + (["--model", str(model)] if model else [])
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    log = open(out.parent / f"{out.name}.log", "ab")  # noqa: SIM115 - the child writes it; closed at exit
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log)


def _shards(out: Path) -> int:
    folder = out / "shards"
    return sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0


def memory(n: int, model: Path, work: Path) -> dict:
    """Peak RSS of the CLI per tenth of the shards, and during compaction."""
    data = work / "big.txt"
    data.write_text("\n".join(corpus_texts(n, seed=1)) + "\n", encoding="utf-8")
    out, total_shards = work / "big", -(-n // 256)
    proc = _cli(data, out, model)
    ps, peaks, start = psutil.Process(proc.pid), {}, time.perf_counter()
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss
        except psutil.NoSuchProcess:
            break
        done = _shards(out)
        phase = (
            "compaction" if done >= total_shards or (out / "texts.parquet").exists() else f"{10 * done // total_shards}"
        )
        peaks[phase] = max(peaks.get(phase, 0), rss)
        time.sleep(0.2)
    assert proc.returncode == 0, proc.returncode
    seconds = time.perf_counter() - start
    return {
        "texts": n,
        "seconds": seconds,
        "texts_per_s": n / seconds,
        "peak_rss_mib": {k: round(v / 2**20) for k, v in sorted(peaks.items())},
    }


def _tables(out: Path) -> dict:
    from attndesk.corpus import open_corpus

    with open_corpus(out) as store:
        return {t: store.sql(f"SELECT * FROM {t} ORDER BY ALL") for t in ("texts", "per_text", "heads", "atlas")}


def _kill_when(proc: subprocess.Popen, out: Path, target: int | None, jitter: float) -> str:
    """SIGKILL once ``target`` shards are finished (None: once compaction has begun), plus ``jitter`` s."""
    while proc.poll() is None:
        compacting = (
            any(p.name.startswith(".") and p.suffix in (".part", ".parquet") for p in out.glob(".*"))
            or (out / "texts.parquet").exists()
        )
        if compacting if target is None else _shards(out) >= target:
            time.sleep(jitter)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return f"{'compaction' if target is None else f'{target} shards'} + {jitter * 1000:.0f} ms"
            break
        time.sleep(0.005)
    return "finished first"


def kills(n: int, model: Path, work: Path, count: int = 4, seed: int = 0) -> dict:
    """kill -9 the CLI at random points (after a random number of shards, or in compaction) of one
    run, resuming each time; the final store is compared with an uninterrupted run's."""
    data = work / "kill.txt"
    data.write_text("\n".join(corpus_texts(n, seed=2)) + "\n", encoding="utf-8")
    start = time.perf_counter()
    assert _cli(data, work / "clean", model, ("--shard-size", "128")).wait() == 0
    clean_s = time.perf_counter() - start
    rng, moments, shards = random.Random(seed), [], -(-n // 128)
    for i in range(count):
        proc = _cli(data, work / "killed", model, ("--shard-size", "128"))
        target = None if i == count - 1 else rng.randint(1 + i * shards // count, (i + 1) * shards // count)
        moments.append(_kill_when(proc, work / "killed", target, rng.uniform(0, 0.05)))
    final = _cli(data, work / "killed", model, ("--shard-size", "128"))
    assert final.wait() == 0, f"the resumed run failed ({final.returncode})"
    a, b = _tables(work / "clean"), _tables(work / "killed")
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
    return {"texts": n, "clean_s": clean_s, "kills": moments, "same_store": True}


def atlas(n: int, points: int, work: Path) -> dict:
    """PCA of every MiniLM head over ``points`` queries + ``points`` keys each: compaction time."""
    import attndesk.corpus.compact as compact

    spent = {"project": 0.0, "heads": 0, "points": 0}
    original = compact._projected

    def timed(rows, *args):
        start = time.perf_counter()
        result = original(rows, *args)
        spent["project"] += time.perf_counter() - start
        spent["heads"] += 1
        spent["points"] = max(spent["points"], result[0].num_rows)
        return result

    marks: dict[str, float] = {}
    compact._projected = timed
    try:
        analyze_corpus(
            corpus_texts(n, seed=3),
            work / "atlas",
            max_tokens=64,
            atlas_points=points,
            progress=lambda p: marks.setdefault(p.stage, time.perf_counter()),
        )
    finally:
        compact._projected = original
    return {
        "heads": spent["heads"],
        "points_per_head": spent["points"],
        "pca_all_heads_s": spent["project"],
        "compaction_s": marks["done"] - marks["compacting"],
    }


def ray_vs_local(n: int, model: Path, work: Path) -> dict:
    """The same store from Ray on 2 workers as from the local engine; times for the simulation."""
    texts = corpus_texts(n, seed=4)
    marks: dict[str, list] = {"local": [], "ray": []}
    for engine in ("local", "ray"):
        start = time.perf_counter()
        analyze_corpus(
            texts,
            work / engine,
            model=model,
            max_tokens=64,
            atlas_points=500,
            engine=engine,
            workers=1 if engine == "local" else 2,
            progress=lambda p, e=engine, s=start: marks[e].append((p.stage, p.done, time.perf_counter() - s)),
        )
        marks[engine].append(("end", n, time.perf_counter() - start))
    a, b = _tables(work / "local"), _tables(work / "ray")
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
    shards = -(-n // 256)
    local = dict((stage, t) for stage, _, t in marks["local"])
    ray_first = next(t for stage, done, t in marks["ray"] if stage == "analyzing" and done > 0)
    ray_compacting = dict((stage, t) for stage, _, t in marks["ray"])["compacting"]
    shard_s = local["compacting"] / shards  # one shard on one thread (an actor's share)
    return {
        "texts": n,
        "shards": shards,
        "local_1_thread_s": local["end"],
        "ray_2_workers_s": marks["ray"][-1][2],
        "same_store": True,
        "shard_s": shard_s,
        "ray_first_shard_s": ray_first,
        "ray_startup_s": max(0.0, ray_first - shard_s),
        "compaction_s": local["end"] - local["compacting"],
        "ray_pass_s": ray_compacting,
    }


def simulate(m: dict, texts: int, workers=(1, 2, 4, 8)) -> list[tuple[int, float, float]]:
    """(workers, seconds, speed-up) for ``texts`` texts: start-up + rounds of shards + compaction.
    Assumes one free core per worker and a compaction that does not shrink with workers."""
    shards = -(-texts // 256)
    one = m["ray_startup_s"] + shards * m["shard_s"] + m["compaction_s"] * texts / m["texts"]
    rows = []
    for w in workers:
        t = m["ray_startup_s"] + -(-shards // w) * m["shard_s"] + m["compaction_s"] * texts / m["texts"]
        rows.append((w, t, one / t))
    return rows


def _machine() -> str:
    return (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores (load {os.getloadavg()[0]:.1f}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads"
    )


PARTS = ("speed", "atlas", "kill", "ray", "memory")


def _minilm_model(s: dict, r: dict) -> dict:
    """Simulation inputs for MiniLM: its measured shard time on 2 threads, doubled for an actor's one
    thread (linear thread scaling: an upper bound), with Ray's measured start-up."""
    shards = -(-s["texts"] // 256)
    return {
        "ray_startup_s": r["ray_startup_s"],
        "shard_s": 2 * s["pass_s"] / shards,
        "compaction_s": s["total_s"] - s["pass_s"],
        "texts": s["texts"],
    }


def _report_ray(r: dict, s: dict | None) -> None:
    print(
        f"ray: {r['texts']} texts, local 1 thread {r['local_1_thread_s']:.1f} s, ray 2 workers "
        f"{r['ray_2_workers_s']:.1f} s (start-up {r['ray_startup_s']:.1f} s), same store {r['same_store']}"
    )
    models = [("tiny BERT", r)] + ([("MiniLM", _minilm_model(s, r))] if s else [])
    for name, m in models:
        print(
            f"simulated 100,000 texts ({name}, {m['shard_s']:.2f} s a shard): "
            + "; ".join(f"{w} workers {t:,.0f} s ({x:.2f}x)" for w, t, x in simulate(m, 100_000))
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000, help="texts of the speed comparison (default 2000)")
    parser.add_argument("--full", action="store_true", help="the memory run on 100,000 texts (default 20,000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: every part on a few hundred texts")
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}")
    parser.add_argument(
        "--memory-model",
        choices=("tiny-bert", "minilm"),
        default="tiny-bert",
        help="the memory run's model: the tiny random BERT (default) or the packaged all-MiniLM-L6-v2",
    )
    args = parser.parse_args(argv)
    from pretrained_models import build

    parts, quick = set(args.only.split(",")), args.quick
    work = Path(tempfile.mkdtemp(prefix="attndesk-bench-corpus-"))
    try:
        tiny = build("bert", work / "tiny-bert")
        print(f"machine: {_machine()}")
        s = speed(200 if quick else args.texts, work) if "speed" in parts else None
        if s:
            print(
                f"speed (MiniLM, 64 tokens, {s['texts']} texts): eager forward with attentions {s['eager_s']:.1f} s; "
                f"corpus pass {s['pass_s']:.1f} s ({s['pass_ratio']:.2f}x), with compaction {s['total_s']:.1f} s "
                f"({s['total_ratio']:.2f}x), {s['texts_per_s']:.1f} texts/s"
            )
        if "atlas" in parts:
            a = atlas(60 if quick else 700, 500 if quick else 25000, work)
            print(
                f"atlas: PCA of {a['heads']} heads x {a['points_per_head']:,} points in {a['pca_all_heads_s']:.1f} s "
                f"(compaction with it {a['compaction_s']:.1f} s)"
            )
        if "kill" in parts:
            k = kills(600 if quick else 3000, tiny, work)
            print(
                f"kill -9: {k['texts']} texts, clean run {k['clean_s']:.1f} s, killed at {k['kills']} "
                f"then resumed: same store {k['same_store']}"
            )
        if "ray" in parts:
            _report_ray(ray_vs_local(512 if quick else 3000, tiny, work), s)
        if "memory" in parts:
            model = tiny if args.memory_model == "tiny-bert" else None
            m = memory(2000 if quick else (100_000 if args.full else 20_000), model, work)
            print(
                f"memory ({args.memory_model}): {m['texts']:,} texts in {m['seconds']:.0f} s ({m['texts_per_s']:.0f} texts/s), peak RSS "
                f"MiB per tenth of the shards and in compaction: {m['peak_rss_mib']}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
