"""Activation patching's thread count: chosen for the load before each batched pass, set around
the pass and restored after."""

from __future__ import annotations

import torch

from attndesk.interp import activation_patching, patching
from attndesk.models import load_pretrained
from attndesk.system import threads

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the rug"


def test_each_pass_runs_on_the_count_chosen_for_the_load_then_it_is_restored(folders, monkeypatch):
    model = load_pretrained(folders["gpt2"])
    seen: list[int] = []
    run_chunk = patching._run_chunk

    def spy(*args):  # the real pass, noting the count it runs on
        seen.append(torch.get_num_threads())
        return run_chunk(*args)

    loads = iter([0.0, 0.0] + [5.0] * 100)  # idle for the first choices, then busy
    monkeypatch.setattr(patching, "_run_chunk", spy)
    monkeypatch.setattr(threads, "WORK_PER_THREAD", 1.0)  # the tiny model's passes count as large work
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: next(loads))
    before = torch.get_num_threads()
    budget = patching.budget_for_rows(model, 2, len(model.tokenizer(CLEAN)["input_ids"]))  # several passes
    report = activation_patching(model, CLEAN, CORRUPT, "cat", "dog", memory_budget=budget)
    assert report.forward_passes >= 3
    assert seen == [3] + [1] * (report.forward_passes - 1)
    assert torch.get_num_threads() == before
