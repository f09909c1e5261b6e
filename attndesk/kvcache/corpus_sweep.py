"""The sweep over a corpus: every text x policy x budget, on the corpus pass's engines, into a
Parquet + DuckDB store that a rerun resumes (``sweep_corpus``; the store: ``sweep_store``).

Each text (the corpus pass's inputs: ``attndesk.corpus.sources``) is encoded by the model, cut at
``max_tokens``, and its last ``decode`` tokens are read as decode steps (as in ``sweep``: teacher
forcing, so every kind of policy compresses); a text too short for that reads all but its first
token. Each (policy, budget) gives one row of ``sweep.measure``'s numbers over the text's decode
rows: KL mean and max (float64), agreement with the full run, next-token correctness, the task's
answer accuracy where the text has one (a toy task's layout: ``Task.answer_rows``; NaN elsewhere),
keys kept and the attention-output error. A (policy, budget) a text cannot take (a policy's check
refuses it) gets NaN numbers and the refusal in ``note``, and the pass goes on.

The engines, shards, manifest, resume and atomic writes are the corpus pass's
(``attndesk.corpus.engine.run_pass``): this module gives the shard's work (``SweepWork``), the
manifest and the compaction (texts and rows sorted, a summary per policy and budget).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from attndesk import __version__
from attndesk.corpus.compact import connect, copy_query, shard_files, write_database
from attndesk.corpus.engine import ENGINES, StoreKind, check_out, run_pass, weights_hash
from attndesk.corpus.shards import Shard, ShardTables
from attndesk.corpus.sources import Source, open_source
from attndesk.corpus.store import MANIFEST, sql_path
from attndesk.errors import ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models import load_pretrained, read_spec
from attndesk.train import load_trained
from attndesk.train.presets import PRESETS, trained_dir

from .base import resolve_budget
from .model import CausalMemo, KVModel, TrainedKV, kv_model
from .simulate import get_policy, prepare, simulate
from .sweep import DECODE_ROWS, measure
from .sweep_store import DATABASE, FIGURES, FORMAT, FORMAT_VERSION, METRICS, KVSweepStore, open_kv_sweep

MAX_TOKENS = 256
SHARD_SIZE = 16
FILES = frozenset(
    {MANIFEST, "shards", "texts.parquet", "rows.parquet", "summary.parquet", "summary.csv", DATABASE}
    | {f"{metric}_vs_budget.png" for metric in FIGURES}
)
KIND = StoreKind(FORMAT, DATABASE, FILES, "KV-cache sweep")

TEXTS_SCHEMA = pa.schema(
    [
        ("text_id", pa.int64()),
        ("text", pa.string()),
        ("tokens", pa.int32()),  # after the cut at max_tokens
        ("cut", pa.bool_()),
        ("prompt", pa.int32()),
        ("decode", pa.int32()),  # 0: a text of one token, no row
        ("answers", pa.int32()),  # answer rows among the decode rows (a toy task's layout)
    ]
)
ROWS_SCHEMA = pa.schema(
    [
        ("text_id", pa.int64()),
        ("policy", pa.string()),
        ("budget", pa.float64()),  # as given: a token count or a ratio of the prompt
        ("keys", pa.int32()),  # the budget in keys per K/V head for this text
        *[(name, pa.float64()) for name in METRICS],
        ("seconds", pa.float64()),  # CPU time of the run in its process
        ("note", pa.string()),  # why a text could not take this (policy, budget); null when it ran
    ]
)


@dataclass(frozen=True)
class ModelRef:
    """What the workers load: a pretrained decoder folder (``kind`` "pretrained") or a trained toy
    run's folder ("trained", a preset's included), by path, so a Ray actor loads the same."""

    kind: str
    path: str
    device: str = "cpu"

    def load(self) -> CausalMemo:
        if self.kind == "pretrained":
            read_spec(self.path)  # a folder that is not a model says so before any weight is read
            return CausalMemo(kv_model(load_pretrained(self.path, device=self.device)))
        return CausalMemo(kv_model(load_trained(Path(self.path))))

    def fingerprint(self) -> str:
        """sha256 of the model's files: a pretrained folder's weights, a toy run's every file."""
        folder = Path(self.path)
        if self.kind == "pretrained":
            return weights_hash(folder)
        digest = hashlib.sha256()
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()


def model_ref(model: str | Path | None = None, trained: str | Path | None = None, device: str = "cpu") -> ModelRef:
    """A pretrained decoder's folder (``model``) or a trained toy (``trained``: a preset's name or
    a saved run's folder); one of them."""
    if (model is None) == (trained is None):
        raise ConfigError("give the model: a pretrained decoder's folder or a trained toy (a preset or a run's folder)")
    if model is not None:
        return ModelRef("pretrained", str(Path(model).expanduser().resolve()), device)
    folder = trained_dir() / str(trained) if str(trained) in PRESETS else Path(str(trained)).expanduser()
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{trained}: neither a preset ({', '.join(PRESETS)}) nor a saved run's folder")
    return ModelRef("trained", str(folder.resolve()), device)


@dataclass
class SweepWork:
    """One shard of the sweep: every text of it at every (policy, budget), on the corpus engines."""

    ref: ModelRef
    policies: tuple[str, ...]
    budgets: tuple[int | float, ...]
    decode: int
    max_tokens: int
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: tuple[str, ...] = ("texts", "rows")
    kind: StoreKind = KIND
    unit: str = "texts"

    def load(self) -> CausalMemo:
        return self.ref.load()

    def flops(self, model: KVModel) -> float:
        """A [width x width] projection of a text's every token."""
        return 2.0 * self.max_tokens * (model.heads * model.head_dim) ** 2

    def finish(self, out: Path) -> None:
        compact_sweep(out, self.policies)

    def begin(self, out: Path, done: set[int]) -> None:
        """Nothing carries from one shard to the next."""

    def written(self, result: Shard) -> None:
        """Nothing carries from one shard to the next."""

    def run(
        self,
        model: KVModel,
        index: int,
        first: int,
        texts: list[str],
        *,
        ctx: JobContext | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> ShardTables:
        """The shard's ``texts`` and ``rows`` tables; ``ctx`` checked before each run, ``on_batch(1)``
        after each text."""
        ctx = job_context(ctx)
        kvm = model if isinstance(model, CausalMemo) else CausalMemo(kv_model(model))
        text_rows: list[dict] = []
        rows: list[dict] = []
        for offset, text in enumerate(texts):
            text_rows.append(self._text(kvm, first + offset, text, rows, ctx))
            if on_batch is not None:
                on_batch(1)
        return ShardTables(
            index,
            {
                "texts": pa.Table.from_pylist(text_rows, schema=TEXTS_SCHEMA),
                "rows": pa.Table.from_pylist(rows, schema=ROWS_SCHEMA),
            },
        )

    def _text(self, kvm: CausalMemo, text_id: int, text: str, rows: list[dict], ctx: JobContext) -> dict:
        """One text's runs appended to ``rows``; its row of the texts table."""
        try:
            ids = kvm.encode(text)
        except ConfigError as exc:  # a toy's text that is not its token ids: the pass stops, finished shards kept
            raise ConfigError(f"text {text_id}: {exc}") from None
        limit = min(self.max_tokens, kvm.max_tokens or self.max_tokens)
        cut, ids = len(ids) > limit, ids[:limit]
        decode = min(self.decode, len(ids) - 1)
        prompt = len(ids) - decode
        answers = self._answers(kvm, ids, prompt)
        described = {"text_id": text_id, "text": text, "tokens": len(ids), "cut": cut, "prompt": prompt}
        described |= {"decode": decode, "answers": len(answers)}
        if decode < 1:
            return described
        for name in self.policies:
            for budget in self.budgets:
                ctx.check()
                row: dict[str, Any] = {"text_id": text_id, "policy": name, "budget": float(budget)}
                start = time.process_time()
                try:
                    run = simulate(
                        kvm, ids, name, budget, prefill=prompt, ctx=ctx.quiet(), **self.options.get(name, {})
                    )
                except ConfigError as exc:
                    rows.append(row | {"keys": resolve_budget(budget, prompt), "note": str(exc)})
                    continue
                seconds = time.process_time() - start
                rows.append(row | {"keys": run.budget} | measure(run, answers or None) | {"seconds": seconds})
        return described

    @staticmethod
    def _answers(kvm: CausalMemo, ids: list[int], prompt: int) -> dict[int, int]:
        """{row: the answer token} of a toy task's layout, among the decode rows."""
        inner = kvm.inner
        if not isinstance(inner, TrainedKV):
            return {}
        rows = inner.run.task.answer_rows(ids) or []
        return {row: ids[row + 1] for row in rows if prompt <= row < len(ids) - 1}


def _check(
    policies: Sequence[str],
    budgets: Sequence[int | float],
    decode: int,
    max_tokens: int,
    engine: str,
    shard_size: int,
    workers: int | None,
    options: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, dict[str, Any]]:
    """Every argument's check before any model is loaded; the options by policy."""
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    for name, value, least in (("decode", decode, 1), ("max_tokens", max_tokens, 2), ("shard_size", shard_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be a whole number of at least {least}, not {value!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be a whole number of at least 1, not {workers!r}")
    if not policies:
        raise ConfigError("give at least one policy")
    if not budgets:
        raise ConfigError("give at least one budget")
    for budget in budgets:
        resolve_budget(budget, max_tokens)  # a budget of 0, a ratio outside (0, 1]: refused here
    chosen = {name: dict((options or {}).get(name, {})) for name in policies}
    unknown = [name for name in (options or {}) if name not in chosen]
    if unknown:
        raise ConfigError(f"options for {unknown[0]}, which is not among the policies")
    for name, opts in chosen.items():
        try:
            get_policy(name).parse(opts)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return chosen


def _check_on(kvm: KVModel, source: Source, work: SweepWork) -> None:
    """The grid on the corpus's first text: a policy's refusal of the model or a budget, in one
    line, before anything is written."""
    ids = kvm.encode(next(iter(source.texts())))[: min(work.max_tokens, kvm.max_tokens or work.max_tokens)]
    if len(ids) < 2:
        return
    prompt = len(ids) - min(work.decode, len(ids) - 1)
    for name in work.policies:
        for budget in work.budgets:
            prepare(kvm, ids, name, budget, 0, prompt, work.options[name])


def _manifest(kvm: KVModel, ref: ModelRef, source: Source, work: SweepWork, shard_size: int, run: dict) -> dict:
    """What the store records; ``arguments`` must match for a resume (``run`` is recorded only)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "attndesk": __version__,
        "run": run,
        "model": {
            "name": kvm.name,
            "kind": ref.kind,
            "path": ref.path,
            "sha256": ref.fingerprint(),
            "layers": kvm.layers,
            "heads": kvm.heads,
            "kv_heads": kvm.kv_heads,
        },
        "data": {"describe": source.describe, "texts": source.count, "sha256": source.fingerprint},
        "arguments": {
            "policies": list(work.policies),
            "budgets": list(work.budgets),
            "decode": work.decode,
            "max_tokens": work.max_tokens,
            "options": work.options,
            "shard_size": shard_size,
            "device": ref.device,
        },
        "complete": False,
    }


def _summary_query(rows: str, policies: Sequence[str]) -> str:
    """Per policy and budget over the texts: each metric's mean and spread (sample standard deviation,
    quartiles), NaN (a text without an answer, a refused run) left out; the grid's policy order."""
    order = "CASE policy " + " ".join(f"WHEN '{p}' THEN {i}" for i, p in enumerate(policies)) + " END"

    def value(m: str) -> str:
        return f"CASE WHEN isnan({m}) THEN NULL ELSE {m} END"

    stats = ", ".join(
        f'avg({value(m)}) AS "{m}", stddev_samp({value(m)}) AS "{m}_std", '
        f'quantile_cont({value(m)}, 0.25) AS "{m}_q1", quantile_cont({value(m)}, 0.75) AS "{m}_q3", '
        f'count({value(m)}) AS "{m}_texts"'
        for m in METRICS
    )
    return (
        f"SELECT policy, budget, count(*) AS texts, count(note) AS refused, {stats} FROM {rows} "
        f"GROUP BY policy, budget ORDER BY {order}, budget"
    )


def compact_sweep(out: Path, policies: Sequence[str]) -> None:
    """The finished shards as the store's tables (texts, rows, summary, summary.csv) and its database."""
    con = connect()
    try:
        copy_query(con, f"SELECT * FROM {shard_files(out, 'texts')} ORDER BY text_id", out / "texts.parquet")
        order = "CASE policy " + " ".join(f"WHEN '{p}' THEN {i}" for i, p in enumerate(policies)) + " END"
        copy_query(
            con,
            f"SELECT * FROM {shard_files(out, 'rows')} ORDER BY {order}, budget, text_id",
            out / "rows.parquet",
        )
        rows = f"read_parquet({sql_path(out / 'rows.parquet')})"
        copy_query(con, _summary_query(rows, policies), out / "summary.parquet")
        tmp = out / ".summary.csv.part"
        summary = f"SELECT * FROM read_parquet({sql_path(out / 'summary.parquet')})"
        con.execute(f"COPY ({summary}) TO {sql_path(tmp)} (HEADER)")
        tmp.replace(out / "summary.csv")
    finally:
        con.close()
    write_database(out, DATABASE, ("texts", "rows", "summary"))


def sweep_corpus(
    texts,
    out,
    *,
    model: str | Path | None = None,
    trained: str | Path | None = None,
    policies: Sequence[str] = ("streaming", "h2o", "snapkv", "oracle"),
    budgets: Sequence[int | float] = (8, 16, 32, 64),
    decode: int = DECODE_ROWS,
    max_tokens: int = MAX_TOKENS,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    engine: str = "local",
    workers: int | None = None,
    resume: bool = True,
    shard_size: int = SHARD_SIZE,
    device: str = "cpu",
    ray_address: str | None = None,
    ctx: JobContext | None = None,
) -> KVSweepStore:
    """Sweep ``policies`` x ``budgets`` over every text of ``texts`` (a .txt/.jsonl/.csv/.parquet
    file, a folder of .txt files or a sequence of strings; a toy's texts are token ids separated
    by spaces) with ``model`` (a pretrained decoder's folder) or ``trained`` (a toy preset's name or
    a saved run's folder), into the store ``out`` (``sweep_store``), and return it.

    ``decode``: the text's last tokens read as decode steps; ``max_tokens``: tokens a text keeps.
    ``engine``: "local" (``workers``: torch threads) or "ray" (``workers`` actors; ``ray_address``
    or RAY_ADDRESS joins a cluster). ``ctx``: progress (texts) and cancellation (finished shards
    stay; the same call resumes). ``resume=False`` starts over. Bad input: ``ConfigError`` in one
    line, nothing written."""
    ctx = job_context(ctx)
    chosen = _check(policies, budgets, decode, max_tokens, engine, shard_size, workers, options)
    out = Path(out).expanduser()
    check_out(out, KIND)
    source = open_source(texts)
    ref = model_ref(model, trained, device)
    kvm = ref.load()
    work = SweepWork(ref, tuple(policies), tuple(budgets), decode, max_tokens, chosen)
    _check_on(kvm, source, work)
    manifest = _manifest(kvm, ref, source, work, shard_size, {"engine": engine, "workers": workers})
    run_pass(
        work,
        kvm,
        source,
        out,
        manifest,
        resume=resume,
        engine=engine,
        shard_size=shard_size,
        workers=workers,
        ray_address=ray_address,
        ctx=ctx,
    )
    return open_kv_sweep(out)


__all__ = [
    "KIND",
    "MAX_TOKENS",
    "ROWS_SCHEMA",
    "SHARD_SIZE",
    "TEXTS_SCHEMA",
    "ModelRef",
    "SweepWork",
    "compact_sweep",
    "model_ref",
    "sweep_corpus",
]
