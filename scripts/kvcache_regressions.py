"""The pictures of two published KV-cache eviction bugs, reproduced (docs/kvcache.md).

``python scripts/kvcache_regressions.py [OUT_DIR]`` (default docs/) writes:

- ``kvcache-h2o-grace.png``: H2O's keep rasters on a tiny random Llama (14-token prompt, budget 8,
  24 decode steps, no recent window) with the grace rule and without it: without, every decode row
  keeps the prompt's same 8 keys.
- ``kvcache-sink-collapse.png``: KL(full || compressed) per row of StreamingLLM with 4 sinks and
  with none (budget 16) on the hand-built sink model (``attndesk.kvcache.regressions.sink_model``).
- ``kvcache-sink-rasters.png``: the two runs' keep rasters.

Offscreen Qt; the checkpoint is built in a temporary folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import numpy as np
    from pretrained_models import build

    from attndesk.kvcache.regressions import h2o_grace, sink_collapse
    from attndesk.models import load_pretrained
    from attndesk.models.loader import transformers_offline
    from attndesk.render.kvcache import write_curves, write_keep_raster

    out = Path((argv or sys.argv[1:] or [str(ROOT / "docs")])[0])
    transformers_offline()
    with tempfile.TemporaryDirectory() as folder:
        llama = load_pretrained(build("llama", Path(folder) / "llama", max_position_embeddings=128))
        ids = [(7 * i + 3) % 29000 + 1000 for i in range(14)]
        h2o = h2o_grace(llama, ids, budget=8, steps=24)
        panels = []
        for tag, run in (("grace", h2o.with_rule), ("no grace", h2o.without_rule)):
            panels += [
                (f"{tag}: layer {layer}, K/V head {head}", run.keep[layer, head])
                for layer in range(2)
                for head in range(2)
            ]
        write_keep_raster(
            panels,
            out / "kvcache-h2o-grace.png",
            title="H2O, budget 8, 14-token prompt, 24 decode steps: without the grace rule the prompt stays forever",
        )
    collapse = sink_collapse(budget=16, sinks=4)
    rows = np.arange(collapse.with_rule.rows)
    write_curves(
        {"streaming, 4 sinks": (rows, collapse.with_rule.kl), "streaming, no sink": (rows, collapse.without_rule.kl)},
        out / "kvcache-sink-collapse.png",
        title="StreamingLLM, budget 16, on a model with an attention sink: without sinks it collapses",
        x_label="query row (the window slides past the sink at row 16)",
        y_label="KL(full || compressed), nats",
        log_y=True,
    )
    write_keep_raster(
        [
            (f"{tag}, head {head}", run.keep[0, head])
            for tag, run in (("4 sinks", collapse.with_rule), ("no sink", collapse.without_rule))
            for head in range(2)
        ],
        out / "kvcache-sink-rasters.png",
        title="StreamingLLM keep rasters, budget 16",
    )
    for tag, run in (("4 sinks", collapse.with_rule), ("no sink", collapse.without_rule)):
        print(f"{tag}: mean KL past the window {run.kl[16:].mean():.4f}, top-1 agreement {run.agree[16:].mean():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
