"""Edge scores, path patching and circuits against plain torch forward hooks on transformers' own
eager models (GPT-2, LLaMA with grouped K/V heads, T5 with cross-attention, and every other covered
decoder family: GPT-NeoX's parallel blocks, OPT, Phi-3's fused projection, Qwen3, Gemma, OLMo,
SmolLM3, GPT-OSS's mixture of experts), and on the toy decoders."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from pretrained_models import eager

from attndesk.errors import ConfigError
from attndesk.interp import (
    edge_graph,
    edge_scores,
    faithfulness,
    faithfulness_curve,
    find_circuit,
    load_circuit,
    path_patching,
    save_circuit,
)
from attndesk.interp.edges import prepare
from attndesk.interp.graph import Engine
from attndesk.models import load_pretrained
from attndesk.train import TrainConfig, TrainRun, make_task
from attndesk.train.model import build_model
from attndesk.train.presets import load_preset

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the mat"
ANSWER, WRONG = "mat", "cat"


# --- an independent reference: one edge patched with plain hooks on the eager model ---------------


def _modules(hf, family: str):
    """name -> what a reference needs of the eager model, written out per architecture."""
    if family == "gpt2":
        blocks = hf.transformer.h
        return {
            "blocks": {"": blocks},
            "attn": lambda p, l: blocks[l].attn,
            "norm": lambda p, l: blocks[l].ln_1,
            "mlp_norm": lambda p, l: blocks[l].ln_2,
            "mlp": lambda p, l: blocks[l].mlp,
            "out": lambda p, l: blocks[l].attn.c_proj,
            "final": hf.transformer.ln_f,
        }
    if family == "gpt_neox":
        blocks = hf.gpt_neox.layers
        return {
            "blocks": {"": blocks},
            "attn": lambda p, l: blocks[l].attention,
            "norm": lambda p, l: blocks[l].input_layernorm,
            "mlp_norm": lambda p, l: blocks[l].post_attention_layernorm,
            "mlp": lambda p, l: blocks[l].mlp,
            "out": lambda p, l: blocks[l].attention.dense,
            "final": hf.gpt_neox.final_layer_norm,
        }
    if family == "opt":
        blocks = hf.model.decoder.layers
        return {
            "blocks": {"": blocks},
            "attn": lambda p, l: blocks[l].self_attn,
            "norm": lambda p, l: blocks[l].self_attn_layer_norm,
            "mlp_norm": lambda p, l: blocks[l].final_layer_norm,
            "mlp": lambda p, l: blocks[l].fc2,
            "out": lambda p, l: blocks[l].self_attn.out_proj,
            "final": hf.model.decoder.final_layer_norm,
        }
    if family in ("llama", "phi3"):
        blocks = hf.model.layers
        return {
            "blocks": {"": blocks},
            "attn": lambda p, l: blocks[l].self_attn,
            "norm": lambda p, l: blocks[l].input_layernorm,
            "mlp_norm": lambda p, l: blocks[l].post_attention_layernorm,
            "mlp": lambda p, l: blocks[l].mlp,
            "out": lambda p, l: blocks[l].self_attn.o_proj,
            "final": hf.model.norm,
        }
    stacks = {"enc": hf.encoder.block, "dec": hf.decoder.block, "cross": hf.decoder.block}
    return {
        "blocks": {"enc": hf.encoder.block, "dec": hf.decoder.block},
        "attn": lambda p, l: (
            stacks[p][l].layer[1].EncDecAttention if p == "cross" else stacks[p][l].layer[0].SelfAttention
        ),
        "norm": lambda p, l: stacks[p][l].layer[1 if p == "cross" else 0].layer_norm,
        "mlp_norm": lambda p, l: stacks[p][l].layer[-1].layer_norm,
        "mlp": lambda p, l: stacks[p][l].layer[-1].DenseReluDense,
        "out": lambda p, l: (
            (stacks[p][l].layer[1].EncDecAttention if p == "cross" else stacks[p][l].layer[0].SelfAttention).o
        ),
        "final": hf.decoder.final_layer_norm,
        "enc_final": hf.encoder.final_layer_norm,
    }


def _split(name: str) -> tuple[str, str]:
    """ "enc.L1.H0" -> ("enc", "L1.H0"); "L1.H0" -> ("", "L1.H0")."""
    head, _, rest = name.partition(".")
    return (head, rest) if head in ("enc", "dec", "cross") else ("", name)


def _terms(hf, family, ids, dec_ids, src: str) -> torch.Tensor:
    """The sender's term in the residual stream, [1, T, E], from a plain run with hooks."""
    m = _modules(hf, family)
    prefix, node = _split(src)
    got = {}
    if node == "embed":
        block = m["blocks"][prefix][0]

        def keep(mod, args, kwargs):
            got.setdefault("x", args[0] if args else kwargs["hidden_states"])

        handle = block.register_forward_pre_hook(keep, with_kwargs=True)
    elif node.endswith("MLP"):
        layer = int(node[1:].split(".")[0])
        # a mixture-of-experts MLP returns (output, router scores)
        handle = m["mlp"](prefix, layer).register_forward_hook(
            lambda mod, a, out: _put(got, out[0] if isinstance(out, tuple) else out)
        )
    else:
        layer, head = (int(part[1:]) for part in node.split("."))
        out = m["out"](prefix, layer)

        def term(mod, args):
            z = args[0]
            d = z.shape[-1] // hf.config.num_attention_heads if family != "t5" else hf.config.d_kv
            zh = z[..., head * d : (head + 1) * d]
            w = (
                mod.weight[head * d : (head + 1) * d, :]
                if family == "gpt2"
                else mod.weight[:, head * d : (head + 1) * d].T
            )
            got.setdefault("x", zh @ w)

        handle = out.register_forward_pre_hook(term)
    with torch.no_grad():
        _forward(hf, ids, dec_ids)
    handle.remove()
    return got["x"]


def _put(store: dict, value) -> None:
    store.setdefault("x", value)


def _forward(hf, ids, dec_ids):
    if dec_ids is None:
        return hf(input_ids=ids, use_cache=False).logits[:, -1].double()
    return hf(input_ids=ids, decoder_input_ids=dec_ids, use_cache=False).logits[:, -1].double()


def _patched(hf, family, ids, dec_ids, delta, dst: str, kind: str) -> torch.Tensor:
    """The last logits of ``ids`` with ``delta`` added to ``dst``'s ``kind`` input before its norm."""
    m = _modules(hf, family)
    handles = []
    seen = {}
    prefix, node = _split(dst)
    if kind == "logits":
        norm = m["final"]
    elif kind == "mlp":
        norm = m["mlp_norm"](prefix, int(node[1:].split(".")[0]))
    elif prefix == "cross" and kind in ("k", "v"):
        norm = m["enc_final"]
    else:
        norm = m["norm"](prefix, int(node[1:].split(".")[0]))
    handles.append(norm.register_forward_pre_hook(lambda mod, a: _put(seen, a[0])))
    if kind in ("logits", "mlp"):  # (OPT's MLP norm reads the stream flattened to [T, E])
        handles.append(
            norm.register_forward_hook(lambda mod, a, out: mod.forward(seen["x"] + delta.reshape(seen["x"].shape)))
        )
    else:
        layer, index = int(node[1:].split(".")[0]), int(node.split(".")[1].lstrip("HKV"))
        attn = m["attn"](prefix, layer)
        position = {"q": 0, "k": 1, "v": 2}[kind]
        if family == "gpt2":
            proj, d = attn.c_attn, attn.head_dim
            offset = position * hf.config.n_embd
        elif family == "gpt_neox":  # head by head: its query, key and value
            proj, d = attn.query_key_value, attn.head_size
            offset = 2 * index * d + position * d
        elif family == "phi3":  # every query head, then every key head, then every value head
            proj, d = attn.qkv_proj, attn.head_dim
            heads, kv = hf.config.num_attention_heads, hf.config.num_key_value_heads
            offset = [0, heads * d, (heads + kv) * d][position]
        elif family == "t5":
            proj, d, offset = getattr(attn, kind), attn.key_value_proj_dim, 0
        else:
            proj, d, offset = getattr(attn, f"{kind}_proj"), attn.head_dim, 0
        cut = slice(offset + index * d, offset + (index + 1) * d)

        def patch(mod, a, out):
            new = mod.forward(norm.forward(seen["x"] + delta))
            out = out.clone()
            out[..., cut] = new[..., cut]
            return out

        handles.append(proj.register_forward_hook(patch))
    with torch.no_grad():
        logits = _forward(hf, ids, dec_ids)
    for h in handles:
        h.remove()
    return logits


def _reference(hf, family, model, src, dst, kind, *, base="corrupt"):
    """Edge patching (base corrupt: the clean term in; base clean: the corrupted term in)."""
    clean = torch.tensor([model.tokenizer(CLEAN)["input_ids"]])
    corrupt = torch.tensor([model.tokenizer(CORRUPT)["input_ids"]])
    dec = torch.tensor([[hf.config.decoder_start_token_id]]) if family == "t5" else None
    t_clean = _terms(hf, family, clean, dec, src)
    t_corrupt = _terms(hf, family, corrupt, dec, src)
    answer = model.tokenizer(ANSWER, add_special_tokens=False)["input_ids"][0]
    wrong = model.tokenizer(WRONG, add_special_tokens=False)["input_ids"][0]
    ids, delta = (corrupt, t_clean - t_corrupt) if base == "corrupt" else (clean, t_corrupt - t_clean)
    with torch.no_grad():
        plain = _forward(hf, ids, dec)
    logits = _patched(hf, family, ids, dec, delta, dst, kind)
    return float((logits[0, answer] - logits[0, wrong]) - (plain[0, answer] - plain[0, wrong]))


def _loaded(folders, name):
    model = load_pretrained(folders[name])
    # the tiny checkpoints' tokenizer adds [CLS]/[SEP]: the reference tokenizes the same way
    return model, eager(folders[name])


# the model type -> how the reference reads its modules (the rest share LLaMA's names)
REFERENCE = {"gpt2": "gpt2", "t5": "t5", "gpt_neox": "gpt_neox", "opt": "opt", "phi3": "phi3"}
NEW_DECODERS = ["gpt_neox", "opt", "phi3", "qwen3", "gemma", "olmo", "smollm3", "gpt_oss"]


@pytest.mark.parametrize(
    "name",
    ["gpt2", "llama", "t5", *(pytest.param(n, marks=pytest.mark.slow) for n in NEW_DECODERS[3:])] + NEW_DECODERS[:3],
)
def test_exact_edge_patching_equals_plain_hooks(folders, name):
    model, hf = _loaded(folders, name)
    family = REFERENCE.get(name, "llama")
    table = edge_scores(model, CLEAN, CORRUPT, ANSWER, WRONG, method="exact")
    assert list(table.columns) == ["src", "dst", "kind", "score"]
    assert len(table) == len(edge_graph(model))
    rng = np.random.default_rng(0)
    rows = table if len(table) <= 48 else table.iloc[np.sort(rng.choice(len(table), 40, replace=False))]
    if name == "t5":  # every kind of cross edge at least once
        cross = table[table.dst.str.startswith("cross.")].groupby("kind").head(2)
        rows = rows.combine_first(cross)
    for src, dst, kind, score in rows.itertuples(index=False):
        want = _reference(hf, family, model, src, dst, kind)
        assert score == pytest.approx(want, abs=2e-5 + 1e-4 * abs(want)), (src, dst, kind)
    assert table.score.abs().max() > 1e-3  # the prompts differ enough for the comparison to mean something


def test_grouped_kv_edges_end_at_the_group(folders):
    model, _ = _loaded(folders, "llama")
    graph = edge_graph(model)
    keys = graph[graph.kind.isin(["k", "v"])]
    assert set(keys.dst) == {f"L{layer}.KV{g}" for layer in range(2) for g in range(2)}
    assert set(graph[graph.kind == "q"].dst) == {f"L{layer}.H{h}" for layer in range(2) for h in range(4)}


@pytest.mark.parametrize(("name", "kind"), [("gpt2", "v"), ("llama", "k"), ("gpt_neox", "q"), ("phi3", "v")])
def test_path_patching_equals_plain_hooks(folders, name, kind):
    model, hf = _loaded(folders, name)
    frame = path_patching(model, CLEAN, CORRUPT, ANSWER, WRONG, kind=kind)
    assert frame.loc["L1.H0"].isna().all()  # a layer's heads send to no head of their own layer
    for sender in ("L0.H0", "L0.H3"):
        for receiver in frame.columns[-2:]:
            want = _reference(hf, REFERENCE.get(name, "llama"), model, sender, receiver, kind, base="clean")
            assert frame.loc[sender, receiver] == pytest.approx(want, abs=2e-5 + 1e-4 * abs(want))


def test_faithfulness_ends_are_exact_and_match_the_plain_runs(folders):
    model = load_pretrained(folders["gpt2"])
    table = edge_scores(model, CLEAN, CORRUPT, ANSWER, WRONG, method="eap")
    every = set(zip(table.src, table.dst, table.kind))
    assert faithfulness(model, every, CLEAN, CORRUPT, ANSWER, WRONG) == 1.0
    assert faithfulness(model, set(), CLEAN, CORRUPT, ANSWER, WRONG) == 0.0
    half = find_circuit(table, top_n=len(table) // 2)
    value = faithfulness(model, half, CLEAN, CORRUPT, ANSWER, WRONG)
    assert np.isfinite(value) and value not in (0.0, 1.0)
    # the empty circuit's run is the corrupted run: its metric is the plain corrupted metric
    from attndesk.interp.circuits import evaluate
    from attndesk.interp.edges import prepare
    from attndesk.jobs import JobContext

    setup = prepare(model, CLEAN, CORRUPT, ANSWER, WRONG, "logit_diff", target=None, memory_budget=None)
    m_full, m_empty = evaluate(setup, [frozenset(every), frozenset()], JobContext())
    assert m_full == pytest.approx(table.attrs["clean_metric"], abs=1e-5)
    assert m_empty == pytest.approx(table.attrs["corrupt_metric"], abs=1e-5)


def _toy(**changes) -> TrainRun:
    changes = {"layers": 1, **changes}
    cfg = TrainConfig(task="induction", seed=1, heads=2, embed_dim=16, **changes)
    cfg.validate()
    return TrainRun(cfg, make_task(cfg), build_model(cfg))


def test_eap_equals_exact_where_the_metric_is_linear_in_the_edge():
    """A one-layer attention-only toy decoder without LayerNorm under the logit difference: the
    logits and every value input enter the metric linearly (a value edge moves the head's output
    through a fixed attention pattern), so the first-order estimate is exact there; query and key
    edges go through the softmax and are not."""
    run = _toy()
    clean, corrupt = [3, 4, 5, 6, 3, 4], [7, 8, 9, 10, 3, 4]
    exact = edge_scores(run, clean, corrupt, 5, 9, method="exact")
    eap = edge_scores(run, clean, corrupt, 5, 9, method="eap")
    linear = exact.kind.isin(["v", "logits"]).to_numpy()
    np.testing.assert_allclose(eap.score[linear], exact.score[linear], atol=1e-5, rtol=1e-4)
    assert np.abs(exact.score[linear]).max() > 1e-2
    assert not np.allclose(eap.score[~linear], exact.score[~linear], atol=1e-5)
    # along EAP-IG's path the attention pattern moves, so only the logits edges stay exact
    logits = (exact.kind == "logits").to_numpy()
    for variant in ("inputs", "activations"):
        ig = edge_scores(run, clean, corrupt, 5, 9, method="eap-ig", steps=3, ig=variant)
        np.testing.assert_allclose(ig.score[logits], exact.score[logits], atol=1e-5, rtol=1e-4)


def test_toy_circuits_curve_acdc_and_json(tmp_path):
    run = _toy(mlp=True, layernorm=True)
    clean, corrupt = [[3, 4, 5, 6, 3, 4], [6, 5, 4, 3, 6, 5]], [[7, 8, 9, 10, 3, 4], [9, 8, 7, 10, 6, 5]]
    table = edge_scores(run, clean, corrupt, [5, 4], [9, 8], method="eap-ig", ig="activations")
    assert table.attrs["pairs"] == 2
    curve = faithfulness_curve(run, table, clean, corrupt, [5, 4], [9, 8], draws=3)
    assert curve["faithfulness"].iloc[0] == 0.0 and curve["faithfulness"].iloc[-1] == 1.0
    assert (curve["random_std"] >= 0).all()
    kept = find_circuit(
        table, threshold=1e-3, method="acdc", model=run, clean=clean, corrupt=corrupt, answer=[5, 4], wrong=[9, 8]
    )
    assert kept <= set(zip(table.src, table.dst, table.kind))
    path = save_circuit(kept, tmp_path / "c.json", method="acdc")
    assert load_circuit(path) == kept


def test_bad_inputs_say_one_line(folders):
    model, _ = _loaded(folders, "gpt2")
    with pytest.raises(ConfigError, match="equal token lengths; aligned") as info:
        edge_scores(model, "the cat sat", "the big dog sat", ANSWER, WRONG)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="single token"):
        edge_scores(model, CLEAN, CORRUPT, "mat mat", WRONG)
    with pytest.raises(ConfigError, match=r"over the memory budget.*fit"):
        edge_scores(model, CLEAN, CORRUPT, ANSWER, WRONG, memory_budget=2**25)
    with pytest.raises(ConfigError, match="not covered: its attention and MLP outputs pass through a norm"):
        edge_scores(load_pretrained(folders["gemma2"]), CLEAN, CORRUPT, ANSWER, WRONG)
    with pytest.raises(ConfigError, match="not covered: its blocks normalise the residual sum"):
        edge_scores(load_pretrained(folders["bert"]), CLEAN, CORRUPT, ANSWER, WRONG)
    with pytest.raises(ConfigError, match="top_n"):
        find_circuit(edge_graph(model).assign(score=0.0), method="topn")


def test_no_lm_head_is_refused(tmp_path):
    from pretrained_models import build_bare

    model = load_pretrained(build_bare("gpt2", tmp_path / "bare"))
    with pytest.raises(ConfigError, match="off"):
        edge_scores(model, CLEAN, CORRUPT, ANSWER, WRONG)


@pytest.mark.slow  # TransformerLens' import and its one forward per edge: about 30 s
def test_head_to_head_edges_equal_transformer_lens_direct_path_patching(folders):
    """TransformerLens' direct path patching (clean-minus-corrupted write of one head added to
    one later head's own pre-norm Q/K/V input in the corrupted run) is our exact edge score plus
    the corrupted metric."""
    pytest.importorskip("transformer_lens")
    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    model, hf = _loaded(folders, "gpt2")
    bridge = TransformerBridge.boot_transformers(
        str(folders["gpt2"]), hf_model=hf, tokenizer=model.tokenizer, device="cpu"
    )
    bridge.eval()
    clean = torch.tensor([model.tokenizer(CLEAN)["input_ids"]])
    corrupt = torch.tensor([model.tokenizer(CORRUPT)["input_ids"]])
    answer = model.tokenizer(ANSWER, add_special_tokens=False)["input_ids"][0]
    wrong = model.tokenizer(WRONG, add_special_tokens=False)["input_ids"][0]
    _, clean_cache = bridge.run_with_cache(clean)
    _, corrupt_cache = bridge.run_with_cache(corrupt)

    def metric(logits):
        return logits[0, -1, answer] - logits[0, -1, wrong]

    table = edge_scores(model, CLEAN, CORRUPT, ANSWER, WRONG, method="exact").set_index(["src", "dst", "kind"])
    m_corrupt = table.attrs["corrupt_metric"]
    biggest = 0.0
    for kind in ("q", "k", "v"):
        for head in range(4):
            theirs = patching.get_act_patch_direct_path(
                bridge, corrupt, clean_cache, corrupt_cache, metric, 0, head, component=kind, verbose=False
            )
            for dst in range(4):
                want = float(theirs[1, dst]) - m_corrupt
                ours = table.loc[(f"L0.H{head}", f"L1.H{dst}", kind), "score"]
                assert ours == pytest.approx(want, abs=2e-5 + 1e-4 * abs(want)), (head, dst, kind)
                biggest = max(biggest, abs(want))
    assert biggest > 1e-4


def test_eap_ig_over_the_inputs_is_complete():
    """Every path from the embeddings runs through one of the embed node's edges, so integrated
    gradients over the inputs give embed's edges summing to m_clean - m_corrupt (LayerNorm and
    MLPs included), as the number of steps grows."""
    run = _toy(mlp=True, layernorm=True, layers=2)
    clean, corrupt = [3, 4, 5, 6, 3, 4], [7, 8, 9, 10, 3, 4]
    gaps = []
    for steps in (2, 24):
        table = edge_scores(run, clean, corrupt, 5, 9, method="eap-ig", steps=steps)
        total = table.attrs["clean_metric"] - table.attrs["corrupt_metric"]
        gaps.append(abs(table[table.src == "embed"].score.sum() - total))
    assert abs(total) > 1e-2
    assert gaps[1] < 1e-5 * max(1.0, abs(total)) < gaps[0]


@pytest.mark.parametrize("method", ["exact", "eap-ig"])
def test_a_cancelled_job_stops_with_cancelled(method):
    from attndesk.jobs import Cancelled, JobContext

    seen = []

    def progress(fraction, message):
        seen.append(fraction)
        ctx.cancel()

    ctx = JobContext(progress)
    run = _toy()
    pairs = [[3, 4, 5, 6, 3, 4]] * 40, [[7, 8, 9, 10, 3, 4]] * 40
    with pytest.raises(Cancelled):
        edge_scores(run, *pairs, 5, 9, method=method, memory_budget=2**25 + 2**20, ctx=ctx)  # several passes
    assert len(seen) == 1 and seen[0] < 1


@pytest.mark.parametrize(
    "changes",
    [
        {"kv_heads": 1, "position": "alibi", "window": 3, "softcap": 5.0, "sink": "learned"},
        {"position": "sinusoidal", "mlp": True, "layernorm": True, "layers": 2, "kv_heads": 1},
        {"position": "learned", "sink": "off-by-one", "layers": 2},
    ],
)
def test_the_toy_graph_runs_the_toy_decoder(changes):
    """The engine's forward of a toy decoder (every variant its layers take) gives the model's own
    logits; grouped K/V heads end their key and value edges at the group."""
    from attndesk.interp.graph import Engine, Pass

    run = _toy(**changes)
    engine = Engine(run)
    ids = torch.tensor([[3, 4, 5, 6, 3, 4], [6, 5, 4, 3, 6, 5]])
    with torch.no_grad():
        ours = engine.run(ids, None, Pass(engine.graph, None, torch.arange(2)))
    torch.testing.assert_close(ours, run.logits(ids)[:, -1], atol=1e-5, rtol=1e-5)
    graph = edge_graph(run)
    if changes.get("kv_heads") == 1:
        assert set(graph[graph.kind == "k"].dst) == {f"L{layer}.KV0" for layer in range(changes.get("layers", 1))}


def test_pruning_to_connected_edges_keeps_the_faithfulness():
    """An edge off every embed-to-logits path inside the circuit changes nothing: the pruned
    circuit is as faithful (grouped K/V inputs feed their query heads)."""
    from attndesk.interp.circuits import connected

    run = _toy(mlp=True, layernorm=True, layers=2, kv_heads=1)
    clean, corrupt = [3, 4, 5, 6, 3, 4], [7, 8, 9, 10, 3, 4]
    table = edge_scores(run, clean, corrupt, 5, 9, method="eap")
    edges = list(zip(table.src, table.dst, table.kind))
    rng = np.random.default_rng(1)
    for draw in range(3):
        circuit = {edges[i] for i in rng.choice(len(edges), len(edges) // 3, replace=False)}
        pruned = connected(circuit, edges)
        assert pruned < circuit
        # equal in exact arithmetic; the float32 forwards of the two patched graphs round apart by
        # about 1e-6 of the clean-corrupt gap under ATen's scalar kernels (make test-isa)
        assert faithfulness(run, pruned, clean, corrupt, 5, 9) == pytest.approx(
            faithfulness(run, circuit, clean, corrupt, 5, 9), abs=1e-5
        ), draw
    top = find_circuit(table, top_n=10, prune=True)
    assert len(top) <= 10 and connected(top, edges) == top


def _counting_engines(monkeypatch) -> list:
    """A spy on ``graph.Engine``: one entry per engine built (each ``prepare`` builds one)."""
    built: list = []
    real = Engine.__init__

    def counting(self, model):
        built.append(model)
        real(self, model)

    monkeypatch.setattr(Engine, "__init__", counting)
    return built


def test_one_prepared_setup_serves_every_step_with_the_same_numbers(monkeypatch):
    """Scores, ACDC, the curve, a circuit's faithfulness and path patching from one ``prepare``
    equal, bit for bit, what each computes after preparing the question itself."""
    run = _toy(mlp=True, layernorm=True)
    question = ([[3, 4, 5, 6, 3, 4], [6, 5, 4, 3, 6, 5]], [[7, 8, 9, 10, 3, 4], [9, 8, 7, 10, 6, 5]], [5, 4], [9, 8])

    def steps(setup):
        extra = {} if setup is None else {"setup": setup}
        table = edge_scores(run, *question, method="eap", **extra)
        exact = edge_scores(run, *question, method="exact", **extra)
        acdc = find_circuit(table, threshold=1e-2, method="acdc", model=run, clean=question[0], corrupt=question[1],
                            answer=question[2], wrong=question[3], **extra)  # fmt: skip
        curve = faithfulness_curve(run, table, *question, draws=2, **extra)
        faith = faithfulness(run, acdc, *question, **extra)
        paths = path_patching(run, *question, kind="q", **extra)
        return table, exact, acdc, curve, faith, paths

    alone = steps(None)
    built = _counting_engines(monkeypatch)
    setup = prepare(run, *question, "logit_diff", target=None, memory_budget=None)
    shared = steps(setup)
    assert len(built) == 1
    for a, b in zip(alone, shared):
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        else:
            assert a == b
    with pytest.raises(ConfigError, match="measures logit_diff, not prob"):
        edge_scores(run, *question, metric="prob", setup=setup)
    with pytest.raises(ConfigError, match="another model"):
        edge_scores(_toy(), *question, setup=setup)


@pytest.mark.parametrize("name", ["logit_diff", "prob", "kl"])
def test_the_edge_metrics_are_the_patching_metrics(name):
    """``metric_rows`` (per pair) and ``Metric`` (one answer) are one formula, checked against float64 by hand."""
    from attndesk.interp.graph import Pairs, metric_rows
    from attndesk.interp.inputs import Metric

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 11, generator=gen)
    reference = torch.log_softmax(torch.randn(3, 11, generator=gen, dtype=torch.float64), -1)
    ids = torch.zeros((3, 4), dtype=torch.long)
    pairs = Pairs(ids, ids, None, torch.tensor([1, 4, 7]), torch.tensor([2, 5, 9]), [], [])
    pair = torch.tensor([0, 2, 2, 1, 0])
    rows = metric_rows(name, logits, pairs, pair, reference if name == "kl" else None)
    x = logits.double()
    for i, p in enumerate(pair.tolist()):
        answer, wrong = int(pairs.answer[p]), int(pairs.wrong[p])
        one = Metric(name, answer, wrong, reference[p] if name == "kl" else None)(logits[i : i + 1])
        assert rows.dtype == one.dtype == torch.float64 and rows[i] == one[0]
        logp = x[i] - torch.logsumexp(x[i], 0)
        want = {
            "logit_diff": x[i, answer] - x[i, wrong],
            "prob": logp[answer].exp(),
            "kl": (reference[p].exp() * (reference[p] - logp)).sum(),
        }[name]
        assert abs(float(rows[i] - want)) < 1e-12


def test_the_sparse_induction_preset_is_carried_by_a_circuit_of_a_tenth_of_its_edges():
    """The shipped induction-sparse preset: the exact top 10% of the edges keep faithfulness at
    least 0.9 and hold the key input from its previous-token head to its induction head (the
    heads whose value and output weights the head penalty left on); a random edge set of that
    size keeps almost nothing."""
    run = load_preset("induction-sparse")
    rng = np.random.default_rng(0)
    clean, corrupt, answer, wrong = [], [], [], []
    for _ in range(4):
        tokens = rng.permutation(np.arange(1, run.cfg.vocab))[:12]
        s, r = [int(t) for t in tokens[:6]], [int(t) for t in tokens[6:]]
        clean.append([0, *s, *s[:4]])
        corrupt.append([0, *r, *s[:4]])
        answer.append(s[4])
        wrong.append(r[4])
    cfg = run.cfg
    live = [
        f"L{layer}.H{int(norms.argmax())}"
        for layer, norms in enumerate(
            block.attn.out_proj.weight.detach().reshape(cfg.embed_dim, cfg.heads, cfg.head_dim).norm(dim=(0, 2))
            for block in run.model.blocks
        )
    ]
    table = edge_scores(run, clean, corrupt, answer, wrong, method="exact")
    size = len(table) // 10
    circuit = find_circuit(table, top_n=size)
    assert (live[0], live[1], "k") in circuit
    assert faithfulness(run, circuit, clean, corrupt, answer, wrong) >= 0.9
    every = list(zip(table.src, table.dst, table.kind))
    drawn = {every[i] for i in rng.choice(len(every), size, replace=False)}
    assert faithfulness(run, drawn, clean, corrupt, answer, wrong) < 0.5
