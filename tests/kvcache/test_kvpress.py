"""The prompt's keep sets after the prefill equal kvpress 0.5.5's, press by press, on the same saved
random-weight Llama and Qwen2 weights: 50 prompts x 4 budgets each. kvpress runs in its own
environment (``kvpress_env``; skipped with the reason where it cannot be built) through
``kvpress_reference.py``. Budgets keep every block a press protects whole (SnapKV's window, the
sinks), where kvpress's scores have no ties (docs/kvcache.md, the tie rule). Not compared: the
DuoAttention split (kvpress loads its head patterns from the network), the oracle and recency
(no press)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attndesk.kvcache import POLICIES
from attndesk.kvcache.base import View
from attndesk.kvcache.model import kv_model
from attndesk.kvcache.simulate import causal

from .kvpress_env import kvpress_python

PROMPTS, BUDGETS, WINDOW = 50, [12, 16, 20, 28], 8
OPTIONS = {
    "snapkv": {"window": WINDOW},
    "pyramidkv": {"window": WINDOW},
    "adakv": {"window": WINDOW},
    "h2o": {"recent": 0},
}
SCRIPT = Path(__file__).with_name("kvpress_reference.py")


def _float32_tie(differ: list[float], scores: np.ndarray) -> bool:
    """The keys the two sets disagree on have scores equal to float32 precision: kvpress, scoring in
    float32, saw a tie and broke it by torch.topk's order (unspecified); attndesk scores in float64."""
    finite = np.abs(scores[np.isfinite(scores)])
    return bool(np.ptp(differ) <= 2 * np.finfo(np.float32).eps * finite.max())


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_keep_sets_equal_kvpress(kv_folders, request, tmp_path, family):
    python, why = kvpress_python()
    if python is None:
        pytest.skip(why)
    rng = np.random.default_rng(7)
    prompts = [rng.integers(1000, 30000, size=int(rng.integers(36, 64))).tolist() for _ in range(PROMPTS)]
    question = tmp_path / "request.json"
    question.write_text(
        json.dumps({"model": str(kv_folders[family]), "prompts": prompts, "budgets": BUDGETS, "window": WINDOW})
    )
    answer = tmp_path / "kvpress.json"
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run(
        [str(python), str(SCRIPT), str(question), str(answer)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=1700,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(answer.read_text())
    kvm = kv_model(request.getfixturevalue(family))
    mismatches: dict[str, list] = {}
    ties: dict[str, int] = {}
    compared = 0
    for p, ids in enumerate(prompts):
        prefill = kvm.forward(ids, causal(kvm.layers, kvm.kv_heads, len(ids)))
        views = {name: View(model=kvm, ids=ids, prompt=len(ids), prefill=prefill) for name in theirs}
        for b, budget in enumerate(BUDGETS):
            for name, sets in theirs.items():
                policy = POLICIES[name]
                mine = policy.prefill_keep(views[name], budget, policy.parse(OPTIONS.get(name, {})))
                scores = views[name].cache["scores"]
                for layer in range(kvm.layers):
                    differ = []
                    for head in range(kvm.kv_heads):
                        compared += 1
                        theirs_kept = np.zeros(len(ids), bool)
                        theirs_kept[sets[p * len(BUDGETS) + b][layer][head]] = True
                        differ += [scores[layer, head, j] for j in np.flatnonzero(theirs_kept != mine[layer, head])]
                    if not differ:
                        continue
                    if _float32_tie(differ, scores[layer]):
                        ties[name] = ties.get(name, 0) + 1
                    else:
                        mismatches.setdefault(name, []).append((p, budget, layer))
    print(f"{family}: {compared} keep sets compared; float32 ties at the boundary: {ties or 'none'}")
    assert set(theirs) == {
        "streaming",
        "h2o",
        "snapkv",
        "pyramidkv",
        "adakv",
        "tova",
        "knorm",
        "keydiff",
        "expected_attention",
        "random",
    }
    assert compared == len(theirs) * PROMPTS * len(BUDGETS) * kvm.layers * kvm.kv_heads
    assert not mismatches, {name: (len(cases), cases[:3]) for name, cases in mismatches.items()}
