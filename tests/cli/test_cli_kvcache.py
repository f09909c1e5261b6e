"""``attndesk kvcache``: the table, the curves and the rasters of policies x budgets, and its refusals
(one line on stderr, exit 2, nothing written)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pretrained_models import build

from attndesk.cli import main
from attndesk.models.loader import transformers_offline

TEXT = "the cat sat on the mat and the dog sat on the log while the bird sang in the tree"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    transformers_offline()
    return build("llama", tmp_path_factory.mktemp("kv-cli") / "llama", max_position_embeddings=128)


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), [line for line in err.splitlines() if "%" not in line]


def test_writes_the_table_the_curves_and_the_rasters(qapp, capsys, tmp_path, llama_folder):
    from attndesk.models import encode, load_pretrained

    rows = len(encode(load_pretrained(llama_folder), TEXT).ids)
    prompt = rows // 2  # without --generate, half the input is the prompt
    ratio = int(0.75 * prompt)
    out_dir = tmp_path / "kv"
    code, out, err = run_cli(
        capsys,
        *("kvcache", "--model", str(llama_folder), "--text", TEXT, "--policies", "streaming,snapkv,oracle"),
        *("--budgets", "4,6,0.75", "--option", "snapkv.window=4", "--option", "streaming.sinks=1"),
        *("--out", str(out_dir)),
    )
    assert code == 0, err
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == sorted(
        ["kvcache.csv", "kvcache.parquet", "summary.csv", "kl_vs_budget.png", "accuracy_vs_budget.png"]
        + ["agree_vs_budget.png"]
        + [f"keep_{p}_{b}.png" for p in ("streaming", "snapkv", "oracle") for b in (4, 6, ratio)]
    )
    assert sorted(str(out_dir / n) for n in names) == sorted(out)
    table = pd.read_parquet(out_dir / "kvcache.parquet")
    assert np.allclose(table.kl, pd.read_csv(out_dir / "kvcache.csv").kl, rtol=1e-12, atol=0)
    assert len(table) == 3 * 3 * rows and set(table.budget) == {4, 6, ratio}
    streaming = table[(table.policy == "streaming") & (table.budget == 4)]
    assert (streaming.kept.to_numpy() == np.minimum(np.arange(rows) + 1, 4)).all()
    snap = table[(table.policy == "snapkv") & (table.budget == 4)]
    assert (snap.kl[snap.step < 0] == 0).all() and (snap.kl[snap.step >= 0] > 0).all()
    assert snap.accuracy.iloc[:-1].notna().all() and np.isnan(snap.accuracy.iloc[-1])
    summary = pd.read_csv(out_dir / "summary.csv")
    assert len(summary) == 9 and list(summary.columns) == ["policy", "budget", "kl", "accuracy", "agree"]
    code, _out, err = run_cli(
        capsys,
        *("kvcache", "--model", str(llama_folder), "--text", TEXT, "--policies", "streaming,snapkv"),
        *("--budgets", "4", "--option", "sinks=1", "--out", str(tmp_path / "other")),
    )
    assert code == 2 and err == ["attndesk: error: snapkv takes no option 'sinks'; its options: window, kernel"]


CASES = [
    (("--budgets", "0"), "a budget of 0 keeps no key"),
    (("--budgets", "400"), "that is the full run; give a smaller budget"),
    (("--budgets", "4", "--option", "streaming.nope=1"), "streaming takes no option 'nope'; its options: sinks"),
    (("--budgets", "4", "--policies", "h2o", "--option", "sinks=2"), "h2o takes no option 'sinks'"),
    (("--budgets", "4", "--policies", "bogus"), "no policy 'bogus'"),
    (("--budgets", "4", "--policies", "snapkv"), "snapkv's window of 64 queries needs a longer prompt"),
]


@pytest.mark.parametrize("extra, fragment", CASES, ids=[c[1][:40] for c in CASES])
def test_bad_input_is_one_line_and_nothing_written(capsys, tmp_path, llama_folder, extra, fragment):
    out_dir = tmp_path / "kv"
    args = ["kvcache", "--model", str(llama_folder), "--text", TEXT, "--policies", "streaming"]
    code, out, err = run_cli(capsys, *args, *extra, "--out", str(out_dir))
    assert code == 2 and out == [] and len(err) == 1 and fragment in err[0], err
    assert not out_dir.exists()


def test_an_encoder_is_refused(capsys, tmp_path):
    transformers_offline()
    bert = build("bert", tmp_path / "bert")
    code, _out, err = run_cli(
        capsys, "kvcache", "--model", str(bert), "--text", TEXT, "--budgets", "4", "--out", str(tmp_path / "kv")
    )
    assert code == 2 and len(err) == 1 and "is an encoder" in err[0] and "keeps no KV cache" in err[0]
    assert not (tmp_path / "kv").exists()


def test_a_trained_toy_model(qapp, capsys, tmp_path):
    ids = " ".join(str(i % 30 + 1) for i in range(24))
    code, _out, err = run_cli(
        capsys,
        *("kvcache", "--trained", "induction", "--text", ids, "--policies", "streaming,h2o", "--budgets", "6"),
        *("--generate", "3", "--out", str(tmp_path / "kv")),
    )
    assert code == 0, err
    table = pd.read_csv(tmp_path / "kv" / "kvcache.csv")
    assert len(table) == 2 * 27 and table.step.max() == 2  # 24 prompt rows + 3 decode steps


def test_data_lines_and_generation(qapp, capsys, tmp_path, llama_folder):
    data = tmp_path / "texts.txt"
    data.write_text("the cat sat on the mat\n\nthe dog sat on the log and looked\n", encoding="utf-8")
    code, _out, err = run_cli(
        capsys,
        *("kvcache", "--model", str(llama_folder), "--data", str(data), "--policies", "h2o", "--budgets", "4"),
        *("--generate", "3", "--out", str(tmp_path / "kv")),
    )
    assert code == 0, err
    table = pd.read_csv(tmp_path / "kv" / "kvcache.csv")
    assert sorted(set(table.text)) == [0, 1]  # the empty line is skipped
    for _, rows in table.groupby("text"):
        assert rows.step.max() == 2 and rows.accuracy[rows.step >= 0].isna().all()  # generated: no answer given
    assert sorted(p.name for p in (tmp_path / "kv").iterdir() if p.name.startswith("keep_")) == ["keep_h2o_4.png"]


def test_the_retrieval_check_alone(capsys, tmp_path):
    from attndesk.kvcache.retrieval import retrieval_scores
    from attndesk.train.presets import load_preset

    out_dir = tmp_path / "heads"
    code, out, err = run_cli(
        capsys, "kvcache", "--trained", "needle", "--retrieval", "1,4", "--draws", "1", "--out", str(out_dir)
    )
    assert code == 0, err
    assert sorted(out) == sorted(str(out_dir / n) for n in ("retrieval.csv", "ablation.csv"))
    scores = pd.read_csv(out_dir / "retrieval.csv")
    want = retrieval_scores(load_preset("needle"))
    assert len(scores) == want.size
    np.testing.assert_allclose(scores.retrieval_score, want.ravel(), rtol=1e-12)
    checks = pd.read_csv(out_dir / "ablation.csv")
    assert checks.k.tolist() == [1, 4] and (checks.draws == 1).all()
    best = scores.sort_values("retrieval_score", ascending=False, kind="stable").iloc[0]
    assert checks.top_heads[0] == f"L{int(best['layer'])}H{int(best['head'])}"
    np.testing.assert_allclose(checks.top_drop, checks.full - checks.top_ablated)
    assert (checks.passed == ((checks.top_drop >= 50) & (checks.random_drop <= 5))).all()


def test_the_retrieval_check_defaults_to_its_preset(capsys, tmp_path):
    from attndesk.kvcache.retrieval import RETRIEVAL_PRESET
    from attndesk.train.presets import PRESETS

    out_dir = tmp_path / "heads"
    code, _out, err = run_cli(capsys, "kvcache", "--retrieval", "1", "--draws", "1", "--out", str(out_dir))
    assert code == 0, err
    cfg = PRESETS[RETRIEVAL_PRESET]
    assert len(pd.read_csv(out_dir / "retrieval.csv")) == cfg.layers * cfg.heads == 16


RETRIEVAL_CASES = [
    (("--trained", "induction", "--retrieval", "1"), "--retrieval: retrieval scores read the needle task"),
    (("--trained", "needle", "--retrieval", "8"), "k must be 1 to 7"),
    (("--trained", "needle", "--retrieval", "two"), "is not a list of head counts"),
    (("--trained", "needle", "--retrieval", "1", "--draws", "0"), "--draws: give at least 1"),
    (("--trained", "needle", "--retrieval", "1", "--mask-rows", "prefill"), "--mask-rows: one of decode, all"),
    (("--trained", "needle"), "or --retrieval K for the check alone"),
    (("--text", "1 2 3", "--budgets", "2"), "give the model: --model PATH or --trained NAME"),
    ((), "give the model: --model PATH or --trained NAME"),
    (("--trained", "needle", "--text", "1 2 3"), "--budgets: give the budgets"),
]


@pytest.mark.parametrize("args, fragment", RETRIEVAL_CASES, ids=[c[1][:30] for c in RETRIEVAL_CASES])
def test_retrieval_refusals(capsys, tmp_path, args, fragment):
    code, out, err = run_cli(capsys, "kvcache", *args, "--out", str(tmp_path / "kv"))
    assert code == 2 and out == [] and len(err) == 1 and fragment in err[0], err
    assert not (tmp_path / "kv").exists()


def test_retrieval_refuses_a_pretrained_model(capsys, tmp_path, llama_folder):
    code, _out, err = run_cli(
        capsys, "kvcache", "--model", str(llama_folder), "--retrieval", "1", "--out", str(tmp_path / "kv")
    )
    assert code == 2 and len(err) == 1 and "give a needle-trained toy with --trained" in err[0], err
