"""The KV cache tab's jobs: a lab run draws the weights of simulate's own passes."""

from __future__ import annotations

import numpy as np

from attndesk.kvcache.lab import input_ids, lab_run, open_model
from attndesk.kvcache.model import kv_model
from attndesk.kvcache.simulate import causal, simulate

SOURCE = ("preset", "induction")


def test_a_lab_run_runs_no_forward_pass_beyond_simulates(monkeypatch):
    model = open_model(SOURCE)
    kvm = kv_model(model)
    passes = []
    real = type(kvm).forward

    def counting(self, ids, keep):
        passes.append(len(ids))
        return real(self, ids, keep)

    monkeypatch.setattr(type(kvm), "forward", counting)
    ids, _ = input_ids(model, "")
    simulate(model, ids, "h2o", 6, prefill=len(ids) - 3)
    alone = len(passes)
    passes.clear()
    lab = lab_run(SOURCE, "", "h2o", 6, decode=3)
    assert len(passes) == alone
    monkeypatch.setattr(type(kvm), "forward", real)
    run = lab.run
    assert run.prompt == len(ids) - 3 and not run.keep.all()
    # rows after the first pruned one come from a pass of those rows over the full run's cache, the
    # reference's from one pass of every row: float32 kernels of other shapes can round them otherwise
    # (docs/kvcache-lab.md: up to 2.3e-6 on an AMD EPYC with AVX2; bitwise equal on an Intel Xeon)
    np.testing.assert_allclose(lab.weights, np.stack(kvm.forward(list(run.ids), run.keep).weights), rtol=0, atol=1e-5)
    full = kvm.forward(list(run.ids), causal(kvm.layers, kvm.kv_heads, len(run.ids)))
    np.testing.assert_array_equal(lab.full_weights, np.stack(full.weights))
