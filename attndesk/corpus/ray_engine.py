"""The Ray engine: the same shards through the same work (``engine.ShardWork``: the corpus pass's
``run_shard``, the KV-cache sweep's), on Ray Data actors.

Each actor loads the model once (the work's ``load``: the same folder or preset, so the workers
must see that path: a shared file system on a cluster) and maps one shard a call; the shard's
tables come back to the driver as Arrow IPC bytes and are written to the store there, exactly as
the local engine writes them, so the store is the same. ``ray.init`` joins ``address`` or ``RAY_ADDRESS``
when given (a cluster), else starts a local Ray with ``workers`` CPUs, shut down afterwards.

A clean run prints nothing of Ray's own: no dashboard, no log lines from the workers, no progress
bars, and Ray's notices about its defaults (the token authentication it enabled, the progress bars
we turned off) are dropped by message; every other warning and error of Ray's still shows.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa

from attndesk.errors import ConfigError

from .shards import ShardTables, shards, write_shard

# (logger, the start of a message) of Ray's notices about settings it or we chose, not about the run
_NOTICES = (
    ("ray._private.authentication.authentication_token_setup", "Token authentication is enabled for this Ray"),
    ("ray.data._internal.progress", "Progress bars disabled."),
)


class _DropNotices(logging.Filter):
    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.start)


def _quiet_notices() -> None:
    """Drop Ray's notices (``_NOTICES``) and nothing else of its logging; once per process."""
    for name, start in _NOTICES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNotices) for f in logger.filters):
            logger.addFilter(_DropNotices(start))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class ShardActor:
    """One model per actor (``work.load()``); called with a batch of shards (``index``, ``first``,
    ``texts``). Ray gives each actor one CPU and runs as many actors as it has CPUs, so the actors
    already fill the cores: each runs torch on ``threads`` (1), never more (more would make the
    actors' threads wait for each other on shared cores)."""

    def __init__(self, work, threads: int = 1):
        import torch

        torch.set_num_threads(threads)
        self.work = work
        self.model = work.load()

    def __call__(self, batch: dict) -> dict:
        out: dict[str, list] = {"index": [], **{name: [] for name in self.work.tables}}
        for index, first, texts in zip(batch["index"], batch["first"], batch["texts"]):
            result = self.work.run(self.model, int(index), int(first), [str(t) for t in texts])
            out["index"].append(int(index))
            for name, table in result.tables().items():
                out[name].append(_ipc(table))
        return {
            "index": np.array(out["index"]),
            **{k: np.array(v, dtype=object) for k, v in out.items() if k != "index"},
        }


def _init(workers: int | None, address: str | None) -> bool:
    """Connect to Ray; True when this call started a local Ray (to be shut down afterwards)."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers or 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ConfigError(
            f"Ray cannot start{' at ' + address if address else ''}: {str(exc).splitlines()[0]}"
        ) from None
    return True


def run_ray(
    work,
    source,
    out: Path,
    done: set[int],
    shard_size: int,
    tracker,
    workers: int | None,
    address: str | None,
) -> None:
    """Run every shard not in ``done`` on Ray and write each to ``out`` as it arrives."""
    import ray

    parts = list(shards(source, shard_size, done))
    if not parts:
        return
    items = [{"index": i, "first": f, "texts": t} for i, f, t in parts]
    counts = {i: len(t) for i, _, t in parts}
    _quiet_notices()
    started = _init(workers, address)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        inputs = ray.data.from_items(items, override_num_blocks=len(items))
        # on the local Ray an actor that dies is not restarted (its error ends the pass): restarts
        # serve a cluster's lost nodes, and Ray logs an error-level line for every restartable actor
        # (Ray Data keeps its constructor arguments in the object store). Ray has no named
        # parameter for it, so it goes as a remote argument, which Ray Data warns is deprecated.
        restarts = {"max_restarts": 0} if started else {}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            ds = inputs.map_batches(
                ShardActor,
                batch_size=1,
                compute=ray.data.ActorPoolStrategy(size=min(workers or 2, len(items))),  # no actor without a shard
                num_cpus=1,
                fn_constructor_kwargs={"work": work},
                **restarts,
            )
        for row in ds.iter_rows():
            index = int(row["index"])
            write_shard(out, ShardTables(index, {name: _table(row[name]) for name in work.tables}))
            tracker.add(counts[index], force=True)
            tracker.ctx.check()
    finally:
        if started:
            ray.shutdown()


__all__ = ["ShardActor", "run_ray"]
