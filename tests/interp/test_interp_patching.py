"""Activation patching against transformers' own eager attention patched with plain torch hooks,
one head (or one site) per forward pass; and every bad input refused in one line."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pretrained_models import eager

from attndesk.errors import Cancelled, ConfigError
from attndesk.interp import activation_patching, patch_heads
from attndesk.interp.patching import GAP_SHARE, MIN_ROWS, budget_for_rows, gap_warning, rows_for_budget
from attndesk.models import encode, load_pretrained

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the rug"
ANSWER, WRONG = "cat", "dog"


def out_proj(ref, name: str, layer: int):
    """The output projection of ``layer`` in the eager reference, named by hand per architecture."""
    return {
        "gpt2": lambda: ref.transformer.h[layer].attn.c_proj,
        "llama": lambda: ref.model.layers[layer].self_attn.o_proj,
        "t5": lambda: ref.encoder.block[layer].layer[0].SelfAttention.o,
        "t5-cross": lambda: ref.decoder.block[layer].layer[1].EncDecAttention.o,
    }[name]()


def ids_of(model, text):
    return torch.tensor([encode(model, text).ids])


def reference_logit_diff(ref, model, name, inputs, answer, wrong, hook_module=None, hook=None):
    extra = {"decoder_input_ids": torch.tensor([[0]])} if name.startswith("t5") else {}
    handle = hook_module.register_forward_pre_hook(hook) if hook_module is not None else None
    try:
        with torch.no_grad():
            logits = ref(input_ids=inputs, **extra).logits[0, -1]
    finally:
        if handle is not None:
            handle.remove()
    return float(logits[answer] - logits[wrong])


def eager_head_patching(folder, name, model, answer, wrong, position=None):
    """[layers, heads] raw logit differences: one head of the clean run per corrupted forward."""
    ref = eager(folder)
    clean, corrupt = ids_of(model, CLEAN), ids_of(model, CORRUPT)
    layers, heads = model.num_layers, model.num_heads
    out = np.empty((layers, heads))
    for layer in range(layers):
        module = out_proj(ref, name, layer)
        saved: dict = {}
        reference_logit_diff(
            ref, model, name, clean, answer, wrong, module, lambda m, args, saved=saved: saved.update(z=args[0].clone())
        )
        d = saved["z"].shape[-1] // heads
        where = slice(None) if position is None else position
        for head in range(heads):
            cut = slice(head * d, (head + 1) * d)

            def swap(m, args, cut=cut, z_clean=saved["z"], where=where):
                z = args[0].clone()
                z[:, where, cut] = z_clean[:, where, cut]
                return (z,)

            out[layer, head] = reference_logit_diff(ref, model, name, corrupt, answer, wrong, module, swap)
    base = [reference_logit_diff(ref, model, name, x, answer, wrong) for x in (clean, corrupt)]
    return out, base


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5"])
def test_head_patching_equals_eager_hooks(folders, name):
    model = load_pretrained(folders[name])
    report = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, sites=("head", "head_position"))
    answer, wrong = (model.tokenizer.convert_tokens_to_ids(t) for t in (ANSWER, WRONG))
    values, (m_clean, m_corrupt) = eager_head_patching(folders[name], name, model, answer, wrong)
    np.testing.assert_allclose([report.clean_metric, report.corrupt_metric], [m_clean, m_corrupt], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(report.results["head"].values, values, rtol=1e-5, atol=1e-7)
    expected = (values - m_corrupt) / (m_clean - m_corrupt)
    np.testing.assert_allclose(report.effects("head"), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    # the contract's function gives the same array, in one or a few batched passes
    np.testing.assert_allclose(patch_heads(model, CLEAN, CORRUPT, ANSWER, WRONG), report.effects("head"), atol=1e-12)
    assert report.forward_passes <= 2 and report.results["head"].effects.shape == (model.num_layers, model.num_heads)
    # per position: position 2 ("cat" / "dog") of every head against the same hooks at that position
    at_two, _ = eager_head_patching(folders[name], name, model, answer, wrong, position=2)
    np.testing.assert_allclose(report.results["head_position"].values[:, :, 2], at_two, rtol=1e-5, atol=1e-7)


def _first(o):
    return o[0] if isinstance(o, tuple) else o


def eager_site_value(ref, module, site: str, pos: int, clean, corrupt) -> torch.Tensor:
    """The corrupted run's last logits with ``module``'s input (resid) or output at ``pos`` from the clean run."""
    saved = {}
    if site == "resid":
        handle = module.register_forward_pre_hook(lambda m, a: saved.update(x=a[0].clone()))
    else:
        handle = module.register_forward_hook(lambda m, a, o: saved.update(x=_first(o).clone()))
    with torch.no_grad():
        ref(clean)
    handle.remove()

    def swap_in(m, a):
        x = a[0].clone()
        x[:, pos] = saved["x"][:, pos]
        return (x, *a[1:])

    def swap_out(m, a, o):
        x = _first(o).clone()
        x[:, pos] = saved["x"][:, pos]
        return (x, *o[1:]) if isinstance(o, tuple) else x

    handle = module.register_forward_pre_hook(swap_in) if site == "resid" else module.register_forward_hook(swap_out)
    with torch.no_grad():
        logits = ref(corrupt).logits[0, -1]
    handle.remove()
    return logits


def test_cross_attention_heads_of_an_encoder_decoder_equal_eager_hooks(folders):
    model = load_pretrained(folders["t5"])
    report = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, part="cross")
    answer, wrong = (model.tokenizer.convert_tokens_to_ids(t) for t in (ANSWER, WRONG))
    values, _ = eager_head_patching(folders["t5"], "t5-cross", model, answer, wrong)
    np.testing.assert_allclose(report.results["head"].values, values, rtol=1e-5, atol=1e-7)
    assert report.positions == ["[PAD]"]  # T5 decodes from its start token (the pad id)


def test_residual_attention_and_mlp_sites_equal_eager_hooks(folders):
    model = load_pretrained(folders["gpt2"])
    report = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, sites=("resid", "attn", "mlp"))
    ref = eager(folders["gpt2"])
    answer, wrong = (model.tokenizer.convert_tokens_to_ids(t) for t in (ANSWER, WRONG))
    clean, corrupt = ids_of(model, CLEAN), ids_of(model, CORRUPT)
    modules = {
        "resid": lambda n: ref.transformer.h[n],
        "attn": lambda n: ref.transformer.h[n].attn,
        "mlp": lambda n: ref.transformer.h[n].mlp,
    }
    for site, module_of in modules.items():
        for layer, pos in ((0, 2), (1, 6), (1, 7)):
            logits = eager_site_value(ref, module_of(layer), site, pos, clean, corrupt)
            expected = float(logits[answer] - logits[wrong])
            assert report.results[site].values[layer, pos] == pytest.approx(expected, rel=1e-5, abs=1e-7), (
                site,
                layer,
                pos,
            )


def test_a_concurrent_run_of_the_same_model_is_untouched(folders):
    from attndesk.models import run_pretrained

    model = load_pretrained(folders["gpt2"])
    normal, effects = run_pretrained(model, CLEAN).weights, patch_heads(model, CLEAN, CORRUPT, ANSWER, WRONG)
    found: dict = {}
    worker = threading.Thread(target=lambda: found.update(p=patch_heads(model, CLEAN, CORRUPT, ANSWER, WRONG)))
    worker.start()
    try:
        for _ in range(4):  # the hooks act in the patching thread only
            np.testing.assert_array_equal(run_pretrained(model, CLEAN).weights, normal)
    finally:
        worker.join()
    np.testing.assert_array_equal(found["p"], effects)


def test_other_metrics_batches_progress_and_cancel(folders):
    model = load_pretrained(folders["gpt2"])
    full = activation_patching(model, CLEAN, CORRUPT, ANSWER, metric="kl", sites=("head",))
    assert full.clean_metric == pytest.approx(0.0, abs=1e-6) and full.corrupt_metric > 0
    seen = []
    # a budget of about three copies: more passes, the same numbers
    budget = budget_for_rows(model, 3, len(encode(model, CLEAN).ids))
    tight = activation_patching(
        model,
        CLEAN,
        CORRUPT,
        ANSWER,
        metric="kl",
        sites=("head",),
        memory_budget=budget,
        progress=lambda f, m: seen.append(f),
    )
    assert tight.forward_passes == 3 and tight.batch_rows == 3 and seen[-1] == 1.0
    # float64 metrics and passes padded to MIN_ROWS: a KL gap of ~4e-5 nats no longer amplifies rounding
    np.testing.assert_allclose(tight.effects("head"), full.effects("head"), rtol=0, atol=1e-6)
    prob = activation_patching(model, CLEAN, CORRUPT, ANSWER, metric="prob", sites=("head",))
    assert 0 < prob.clean_metric < 1
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, cancel=stop)


@pytest.fixture(scope="module")
def full_runs(folders):
    """name -> (model, {metric: head and residual patching with every copy in one pass, 1 thread})."""
    runs = {}
    for name in ("gpt2", "t5"):
        model = load_pretrained(folders[name])
        with threads(1):
            runs[name] = model, {m: _patch(model, m, None) for m in ("logit_diff", "kl")}
    return runs


@contextmanager
def threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _patch(model, metric: str, rows: int | None):
    decoder = 1 if model.family == "encoder-decoder" else 0  # T5 decodes from its start token
    budget = None if rows is None else budget_for_rows(model, rows, len(encode(model, CLEAN).ids), decoder)
    wrong = WRONG if metric == "logit_diff" else None
    return activation_patching(
        model, CLEAN, CORRUPT, ANSWER, wrong, metric=metric, sites=("head", "resid"), memory_budget=budget
    )


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["gpt2", "t5"]),
    rows=st.integers(1, 16),
    count=st.sampled_from([1, 2]),
    metric=st.sampled_from(["logit_diff", "kl"]),
)
def test_effects_do_not_depend_on_rows_per_pass_or_threads(full_runs, name, rows, count, metric):
    """Any number of copies per pass (1 to every site in one) and 1 or 2 threads give the effects of one
    single-threaded pass within 1e-6 at a gap the report does not flag, and within 1e-6 times the gap
    that would not be flagged over the gap measured below it (the forward's rounding over the gap)."""
    model, full = full_runs[name]
    before = torch.get_num_threads()
    with threads(count):
        assert torch.get_num_threads() == count
        report = _patch(model, metric, rows)
    assert torch.get_num_threads() == before
    reference = full[metric]
    gap = abs(reference.clean_metric - reference.corrupt_metric)
    tolerance = 1e-6 * max(1.0, GAP_SHARE * reference.metric_scale / gap)
    assert (reference.warning is None) == (tolerance == 1e-6)
    for site in ("head", "resid"):
        np.testing.assert_allclose(report.effects(site), reference.effects(site), rtol=0, atol=tolerance)
        np.testing.assert_allclose(
            report.results[site].raw_effects, reference.results[site].raw_effects, rtol=0, atol=1e-6 * gap
        )
    assert report.batch_rows == min(rows, 16)


def test_a_gap_too_small_for_normalised_effects_is_said_and_raw_effects_kept(folders):
    model = load_pretrained(folders["gpt2"])
    # the tiny random model moves its logits by ~1e-2 over logits spread ~0.1: the logit difference's
    # gap is 6% of that spread (not flagged), KL's 4e-5 of a nat and the probability's 0.1% are
    logit = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, sites=("head",))
    kl = activation_patching(model, CLEAN, CORRUPT, ANSWER, metric="kl", sites=("head",))
    prob = activation_patching(model, CLEAN, CORRUPT, ANSWER, metric="prob", sites=("head",))
    assert logit.warning is None
    spread = float(np.std(last_logits_of(model, CLEAN)))
    # the report's logits come from a padded pass, these from a pass of one row: float32 kernels of
    # other shapes round the logits otherwise (up to 1.2e-7 of |logit| <= 0.5, docs/interp.md)
    assert logit.metric_scale == pytest.approx(spread, rel=1e-6)
    assert kl.metric_scale == 1.0 and prob.metric_scale == pytest.approx(max(prob.clean_metric, prob.corrupt_metric))
    for report in (kl, prob):
        assert report.warning is not None and "\n" not in report.warning
        assert f"{abs(report.clean_metric - report.corrupt_metric):.3g}" in report.warning
    for report in (logit, kl, prob):
        result = report.results["head"]
        np.testing.assert_array_equal(result.raw_effects, result.values - report.corrupt_metric)
        np.testing.assert_allclose(
            result.effects * (report.clean_metric - report.corrupt_metric), result.raw_effects, rtol=1e-12, atol=0
        )
    # the rule itself, at its edge and for either sign of the gap
    assert gap_warning("logit_diff", 1.0, 1.0 - 0.0099, 1.0) is not None
    assert gap_warning("logit_diff", 1.0 - 0.0101, 1.0, 1.0) is None


def last_logits_of(model, text):
    """The last position's logits by a plain forward of transformers' model (float64)."""
    with torch.no_grad():
        return model.model(input_ids=ids_of(model, text)).logits[0, -1].double().numpy()


@pytest.mark.parametrize(
    "args, message",
    [
        ((CLEAN, "the dog sat on the big rug", ANSWER, WRONG), "equal token length"),
        ((CLEAN, CORRUPT, "unbelievably", WRONG), "is 5 tokens"),
        ((CLEAN, CORRUPT, 10**6, WRONG), "outside the model's vocabulary"),
        ((CLEAN, CORRUPT, ANSWER, ANSWER), "same token"),
    ],
)
def test_bad_input_is_one_line(folders, args, message):
    model = load_pretrained(folders["gpt2"])
    with pytest.raises(ConfigError, match=message) as info:
        activation_patching(model, *args)
    assert "\n" not in str(info.value)


def test_encoder_only_model_is_refused(folders):
    model = load_pretrained(folders["bert"])
    with pytest.raises(ConfigError, match="encoder-only"):
        patch_heads(model, CLEAN, CORRUPT, ANSWER, WRONG)
    with pytest.raises(ConfigError, match="one patched forward pass"):
        activation_patching(load_pretrained(folders["gpt2"]), CLEAN, CORRUPT, ANSWER, WRONG, memory_budget=1000)


def test_the_budget_holds_a_pass_of_min_rows_or_is_refused(folders):
    """A decoder's pass starts from ``MIN_ROWS`` unpatched copies: a budget one byte short of them and
    one copy is refused in one line that names the rows and the bytes needed, and the smallest
    budget that holds them patches one copy per pass."""
    model = load_pretrained(folders["gpt2"])
    length = len(encode(model, CLEAN).ids)
    smallest = budget_for_rows(model, 1, length)
    assert rows_for_budget(model, length, 0, smallest) == 1 and rows_for_budget(model, length, 0, smallest - 1) == 0
    with pytest.raises(ConfigError, match=rf"\({MIN_ROWS + 1} rows, the fewest a pass holds\)") as info:
        activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, memory_budget=smallest - 1)
    assert "\n" not in str(info.value)
    report = activation_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, memory_budget=smallest)
    assert report.batch_rows == 1 and report.pass_bytes == smallest and report.forward_passes == 8
