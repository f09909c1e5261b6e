"""``attndesk patch`` and ``attndesk attribute``: files equal to the core's arrays; bad input is one
line on stderr, exit 2, and no folder written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attndesk.cli import main
from attndesk.interp import activation_patching, integrated_gradients, patch_heads
from attndesk.models import load_pretrained

CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the rug"


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_patch_writes_the_cores_effects_and_the_attribution_beside(qapp, capsys, tmp_path, folders):
    out = tmp_path / "patch"
    code, lines, err = run_cli(
        capsys,
        "patch",
        "--model",
        str(folders["gpt2"]),
        "--clean",
        CLEAN,
        "--corrupt",
        CORRUPT,
        "--answer",
        "cat",
        "--wrong",
        "dog",
        "--sites",
        "head,resid",
        "--out",
        str(out),
    )
    assert code == 0, err
    expected = patch_heads(load_pretrained(folders["gpt2"]), CLEAN, CORRUPT, "cat", "dog")
    np.testing.assert_allclose(np.load(out / "patch_head.npy"), expected, rtol=1e-6)
    assert (out / "patch_head.png").stat().st_size > 1000 and (out / "attribution_resid.csv").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["rank_correlation"]) == {"head", "resid"} and summary["forward_passes"] >= 2
    assert any("Spearman" in line for line in err) and str(out / "summary.json") in lines
    # the raw effects beside the normalised ones; no warning at a gap of 6% of the logits' spread
    report = activation_patching(load_pretrained(folders["gpt2"]), CLEAN, CORRUPT, "cat", "dog", sites=("resid",))
    np.testing.assert_allclose(np.load(out / "patch_resid_raw.npy"), report.results["resid"].raw_effects, atol=1e-12)
    assert (out / "patch_head_raw.csv").exists() and summary["warning"] is None
    assert not any("warning" in line for line in err)


def test_patch_says_on_one_line_when_the_gap_is_too_small(qapp, capsys, tmp_path, folders):
    out = tmp_path / "kl"
    args = ["--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "cat", "--metric", "kl", "--sites", "head"]
    code, _, err = run_cli(
        capsys, "patch", "--model", str(folders["gpt2"]), *args, "--no-attribution", "--out", str(out)
    )
    assert code == 0, err
    warnings = [line for line in err if line.startswith("attndesk: warning:")]
    summary = json.loads((out / "summary.json").read_text())
    gap = abs(summary["clean_metric"] - summary["corrupt_metric"])
    assert len(warnings) == 1 and f"{gap:.3g}" in warnings[0] and "raw effects" in warnings[0]
    assert summary["warning"] in warnings[0] and summary["metric_scale"] == 1.0
    raw, effects = np.load(out / "patch_head_raw.npy"), np.load(out / "patch_head.npy")
    np.testing.assert_allclose(raw, effects * (summary["clean_metric"] - summary["corrupt_metric"]), rtol=1e-9)


def test_attribute_writes_integrated_gradients_and_its_completeness(qapp, capsys, tmp_path, folders):
    out = tmp_path / "attr"
    code, _, err = run_cli(
        capsys,
        "attribute",
        "--model",
        str(folders["gpt2"]),
        "--text",
        CLEAN,
        "--target",
        "dog",
        "--method",
        "ig",
        "--steps",
        "16",
        "--out",
        str(out),
    )
    assert code == 0, err
    expected = integrated_gradients(load_pretrained(folders["gpt2"]), CLEAN, "dog", steps=16)
    np.testing.assert_allclose(np.load(out / "attribution_ig.npy")[0], expected, rtol=1e-6)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completeness_error"] < 0.05 and any("completeness error" in line for line in err)


@pytest.mark.parametrize(
    "name, args, message",
    [
        (
            "gpt2",
            ["patch", "--clean", CLEAN, "--corrupt", "the dog sat on the big rug", "--answer", "cat", "--wrong", "dog"],
            "equal token length",
        ),
        (
            "gpt2",
            ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "unbelievably", "--wrong", "dog"],
            "5 tokens",
        ),
        (
            "bert",
            ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "cat", "--wrong", "dog"],
            "encoder-only",
        ),
        ("gpt2", ["attribute", "--text", CLEAN, "--target", "id:99999999"], "outside the model's vocabulary"),
        ("bert", ["attribute", "--text", CLEAN, "--target", "dog"], "encoder-only"),
        (
            "gpt2",
            ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "cat", "--sites", "heads"],
            "unknown site",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(capsys, tmp_path, folders, name, args, message):
    out = tmp_path / "never"
    code, lines, err = run_cli(capsys, args[0], "--model", str(folders[name]), *args[1:], "--out", str(out))
    assert code == 2 and len(err) == 1 and message in err[0] and not lines
    assert not out.exists()


def test_a_missing_model_folder_is_one_line(capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        "attribute",
        "--model",
        str(tmp_path / "nowhere"),
        "--text",
        "a",
        "--target",
        "b",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err) == 1


def test_a_checkpoint_without_its_lm_head_is_one_line(capsys, tmp_path):
    from pretrained_models import build
    from safetensors.torch import load_file, save_file

    folder = build("gpt2", tmp_path / "headless", seed=3, tie_word_embeddings=False)
    weights = load_file(folder / "model.safetensors")
    assert weights.pop("lm_head.weight", None) is not None
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()  # the build's own progress bar
    code, lines, err = run_cli(
        capsys,
        "patch",
        "--model",
        str(folder),
        "--clean",
        CLEAN,
        "--corrupt",
        CORRUPT,
        "--answer",
        "cat",
        "--wrong",
        "dog",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err) == 1 and "no LM head" in err[0] and not lines and not (tmp_path / "o").exists()


RUNS = {
    "patch": ["--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "cat", "--wrong", "dog", "--sites", "head"],
    "attribute": ["--text", CLEAN, "--target", "dog", "--method", "ig", "--steps", "4"],
}


@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_folder_with_files_is_refused_and_left_as_it_was(capsys, folders, earlier_out, command):
    out = str(earlier_out.folder)
    code, lines, err = run_cli(capsys, command, "--model", str(folders["gpt2"]), *RUNS[command], "--out", out)
    assert code == 2 and not lines and len(err) == 1
    assert "holds other files" in err[0] and "choose an empty or new folder" in err[0]
    assert earlier_out.unchanged()


@pytest.mark.parametrize("existing", [True, False], ids=["empty", "new"])
@pytest.mark.parametrize("command", sorted(RUNS))
def test_an_empty_or_new_folder_is_written(qapp, capsys, tmp_path, folders, command, existing):
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    code, lines, err = run_cli(capsys, command, "--model", str(folders["gpt2"]), *RUNS[command], "--out", str(out))
    assert code == 0, err
    assert sorted(Path(line).name for line in lines) == sorted(p.name for p in out.iterdir())
    assert (out / "summary.json").is_file()


INDUCTION = ("--clean", "0 5 6 7 8 5 6", "--corrupt", "0 9 10 11 12 5 6", "--answer", "7", "--wrong", "11")


def test_circuit_writes_the_table_circuit_curve_and_graph(qapp, capsys, tmp_path):
    import pandas as pd

    from attndesk.interp import load_circuit

    out = tmp_path / "circuit"
    code, lines, err = run_cli(
        capsys, "circuit", "--trained", "induction", *INDUCTION, "--top-n", "6", "--draws", "2", "--out", str(out)
    )
    assert code == 0, err
    names = {
        "edges.csv",
        "edges.parquet",
        "circuit.json",
        "faithfulness.csv",
        "faithfulness.png",
        "graph.png",
        "graph.svg",
        "circuit.html",
    }
    assert {p.name for p in out.iterdir()} == names
    assert sorted(lines) == sorted(str(out / n) for n in names)
    csv, parquet = pd.read_csv(out / "edges.csv"), pd.read_parquet(out / "edges.parquet")
    pd.testing.assert_frame_equal(csv, parquet, check_exact=False, rtol=1e-12)
    circuit = load_circuit(out / "circuit.json")
    top = csv.reindex(csv.score.abs().sort_values(ascending=False, kind="stable").index).head(6)
    assert circuit == set(zip(top.src, top.dst, top.kind))
    curve = pd.read_csv(out / "faithfulness.csv")
    assert curve.faithfulness.iloc[0] == 0.0 and curve.faithfulness.iloc[-1] == 1.0
    assert any("6 of 81 edges kept" in line for line in err)


def test_circuit_writes_the_path_patching_heatmap(qapp, capsys, tmp_path, monkeypatch):
    """... and prepares its question once for the scores, the curve, the faithfulness and the paths."""
    import pandas as pd
    from PySide6.QtGui import QImage

    from attndesk.interp import path_patching
    from attndesk.interp.graph import Engine
    from attndesk.train.presets import load_preset

    built = []
    real = Engine.__init__
    monkeypatch.setattr(Engine, "__init__", lambda self, model: built.append(model) or real(self, model))
    out = tmp_path / "paths"
    args = ("--method", "eap", "--draws", "1", "--path-patching", "k", "--out", str(out))
    code, lines, err = run_cli(capsys, "circuit", "--trained", "induction", *INDUCTION, *args)
    assert code == 0, err
    assert len(built) == 1  # one prepare: one engine
    assert {"path_patching_k.csv", "path_patching_k.png"} <= {Path(line).name for line in lines}
    table = pd.read_csv(out / "path_patching_k.csv", index_col="sender")
    want = path_patching(load_preset("induction"), [0, 5, 6, 7, 8, 5, 6], [0, 9, 10, 11, 12, 5, 6], 7, 11, kind="k")
    assert list(table.index) == list(want.index) and list(table.columns) == list(want.columns)
    np.testing.assert_allclose(table.to_numpy(), want.to_numpy(), rtol=1e-9, atol=1e-12)  # NaN where none
    assert np.isfinite(table.to_numpy()).any() and np.isnan(table.to_numpy()).any()
    image = QImage(str(out / "path_patching_k.png"))
    assert not image.isNull() and image.width() > 100
    assert text_lines_above_the_map(out / "path_patching_k.png") == 1  # the title, once


def text_lines_above_the_map(png: Path) -> int:
    """How many lines of dark text a figure draws above its first heatmap: the rows above the map's
    frame (the first row holding a third of the width in one run of one grey) grouped into runs."""
    from PIL import Image

    grey = np.asarray(Image.open(png).convert("L")).astype(int)
    width = grey.shape[1]

    def frame(row: np.ndarray) -> bool:
        starts = np.flatnonzero(np.diff(np.r_[-1, row, -1]) != 0)  # where each run of one grey value starts
        return bool(((np.diff(starts) >= width / 3) & (row[starts[:-1]] < 250)).any())

    top = next((y for y, row in enumerate(grey) if frame(row)), None)
    assert top is not None, f"{png.name}: no heatmap frame found"
    inked = (grey[:top] < 140).any(axis=1)
    return int(np.sum(inked[1:] & ~inked[:-1]) + inked[0])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--clean", "0 5 6", "--corrupt", "0 9 10 11", "--answer", "7", "--wrong", "11"), "equal token lengths"),
        (("--clean", "0 five", "--corrupt", "0 9", "--answer", "7", "--wrong", "11"), "token ids"),
        ((*INDUCTION, "--method", "acdc"), "needs --tau"),
    ],
)
def test_circuit_bad_input_is_one_line_and_nothing_written(capsys, tmp_path, args, message):
    out = tmp_path / "out"
    code, lines, err = run_cli(capsys, "circuit", "--trained", "induction", *args, "--out", str(out))
    assert code == 2 and lines == [] and len(err) == 1 and message in err[0]
    assert not out.exists()


def test_circuit_refuses_a_non_empty_out(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    code, _, err = run_cli(capsys, "circuit", "--trained", "induction", *INDUCTION, "--out", str(tmp_path))
    assert code == 2 and "holds other files" in err[0]


def test_circuit_on_a_pretrained_model(qapp, capsys, tmp_path, folders):
    out = tmp_path / "gpt2"
    args = ("--clean", CLEAN, "--corrupt", "the dog sat on the mat", "--answer", "mat", "--wrong", "cat")
    code, _, err = run_cli(
        capsys, "circuit", "--model", str(folders["gpt2"]), *args, "--method", "eap", "--draws", "1", "--out", str(out)
    )
    assert code == 0, err
    document = json.loads((out / "circuit.json").read_text())
    assert document["method"] == "eap" and document["edges_total"] == 110 and document["edges_kept"] == 11


def test_circuit_acdc_prunes_from_eap_ig_scores(qapp, capsys, tmp_path):
    out = tmp_path / "acdc"
    code, _, err = run_cli(
        capsys,
        "circuit",
        "--trained",
        "induction",
        *INDUCTION,
        "--method",
        "acdc",
        "--tau",
        "0.5",
        "--draws",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    document = json.loads((out / "circuit.json").read_text())
    assert document["method"] == "acdc" and document["scores"] == "eap-ig/inputs"
    assert 0 < document["edges_kept"] < document["edges_total"] == 81


def test_circuit_connected_keeps_only_connected_edges(qapp, capsys, tmp_path):
    import pandas as pd

    from attndesk.interp import find_circuit, load_circuit

    out = tmp_path / "connected"
    code, _, err = run_cli(
        capsys,
        "circuit",
        "--trained",
        "induction",
        *INDUCTION,
        "--top-n",
        "6",
        "--connected",
        "--draws",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    table = pd.read_csv(out / "edges.csv")
    assert (
        load_circuit(out / "circuit.json") == find_circuit(table, top_n=6, prune=True) != find_circuit(table, top_n=6)
    )


def test_a_circuit_goes_into_a_bundle_and_reproduce_measures_it_again(qapp, capsys, tmp_path, folders):
    from attndesk.session.bundle import read_bundle

    model = str(folders["gpt2"])
    found = tmp_path / "found"
    args = ("--clean", CLEAN, "--corrupt", "the dog sat on the mat", "--answer", "mat", "--wrong", "cat")
    code, _, err = run_cli(
        capsys, "circuit", "--model", model, *args, "--method", "eap", "--draws", "1", "--out", str(found)
    )
    assert code == 0, err
    document = json.loads((found / "circuit.json").read_text())
    assert document["question"]["clean"] == CLEAN and document["question"]["wrong"] == "cat"
    bundle = tmp_path / "b.zip"
    code, _, err = run_cli(
        capsys,
        "bundle",
        "--model",
        model,
        "--text",
        CLEAN,
        "--circuit",
        str(found / "circuit.json"),
        "--out",
        str(bundle),
    )
    assert code == 0, err
    assert read_bundle(bundle).circuits == {"circuit.json": (found / "circuit.json").read_bytes()}
    # the bundle's page draws the circuit: its edges with their scores from the edge table
    import zipfile

    import pandas as pd

    from attndesk.render.page import read_page_data

    with zipfile.ZipFile(bundle) as zf:
        page = next(n for n in zf.namelist() if n.endswith(".html"))
        (tmp_path / "page.html").write_bytes(zf.read(page))
    drawn = read_page_data(tmp_path / "page.html")["circuit"]
    table = pd.read_csv(found / "edges.csv").set_index(["src", "dst", "kind"])
    assert {(e["src"], e["dst"], e["kind"]) for e in drawn["edges"]} == {tuple(e) for e in document["edges"]}
    for e in drawn["edges"]:
        assert e["score"] == pytest.approx(table.loc[(e["src"], e["dst"], e["kind"]), "score"], rel=1e-12)
    assert drawn["total"] == 110 and drawn["curve"]["faithfulness"][-1] == 1.0
    code, lines, err = run_cli(capsys, "reproduce", str(bundle))
    assert code == 0, err
    line = next(line for line in lines if line.startswith("circuit circuit.json"))
    assert f"faithfulness {document['faithfulness']:.6g} (bundled {document['faithfulness']:.6g})" in line
    # a circuit whose recorded faithfulness is not what its edges give fails the check
    document["faithfulness"] += 0.5
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(document))
    code, _, err = run_cli(
        capsys, "bundle", "--model", model, "--text", CLEAN, "--circuit", str(wrong), "--out", str(tmp_path / "w.zip")
    )
    assert code == 0, err
    code, _, err = run_cli(capsys, "reproduce", str(tmp_path / "w.zip"))
    assert code == 1 and "wrong.json's faithfulness" in err[-1]


@pytest.mark.parametrize(
    ("change", "message"),
    [({"question": None}, "does not record its question"), ({"format": "x"}, "not an attndesk circuit")],
)
def test_a_bundle_refuses_a_circuit_it_cannot_check(capsys, tmp_path, folders, change, message):
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"format": "attndesk-circuit", "version": 1, "faithfulness": 1.0, "edges": [], **change})
    )
    out = tmp_path / "b.zip"
    code, lines, err = run_cli(
        capsys, "bundle", "--model", str(folders["gpt2"]), "--text", CLEAN, "--circuit", str(path), "--out", str(out)
    )
    assert code == 2 and lines == [] and len(err) == 1 and message in err[0] and not out.exists()
    code, _, err = run_cli(capsys, "bundle", "--text", CLEAN, "--circuit", str(path), "--out", str(out))
    assert code == 2 and "--circuit goes with --model" in err[0]


def circuit_metric(run, ids: list[int], answer: int, wrong: int, circuit=frozenset(), corrupt=None):
    """The logit difference of the induction preset (attention only, no norms) computed by hand:
    every receiver (a head's q, k or v input, the logits) reads the sum of its senders' terms, each
    the term of this run where (sender, receiver, kind) is in ``circuit`` or ``corrupt`` is None,
    else the corrupted run's (``corrupt``: sender -> term). Returns (metric, this run's terms).
    Each head is the model's own attention layer called with its three inputs and only it kept."""
    import torch

    from attndesk.attention.masks import causal_mask

    model = run.model
    length, heads = len(ids), run.cfg.heads
    mask = causal_mask(length)
    with torch.no_grad():
        terms = {"embed": model.embed(torch.tensor([ids]))}
        bias = torch.zeros_like(terms["embed"])  # the output projections' biases: no sender's

        def read(receiver: str, kind: str) -> torch.Tensor:
            own = corrupt is None
            chosen = [t if own or (s, receiver, kind) in circuit else corrupt[s] for s, t in terms.items()]
            return bias + sum(chosen)

        for layer, block in enumerate(model.blocks):
            attn, outputs = block.attn, {}
            for h in range(heads):
                name = f"L{layer}.H{h}"
                only = torch.zeros(heads)
                only[h] = 1.0
                out, _ = attn(read(name, "q"), read(name, "k"), read(name, "v"), mask, position="rope", head_mask=only)
                outputs[name] = out - attn.out_proj.bias
            terms.update(outputs)
            bias = bias + attn.out_proj.bias
        logits = model.unembed(read("logits", "logits"))[0, -1].double()
    return float(logits[answer] - logits[wrong]), terms


def test_an_unconnected_circuits_negative_faithfulness_is_true_and_said(qapp, capsys, tmp_path):
    """The default induction circuit (top 10% by |score|, not --connected) measures -0.14 on this
    pair: a hand-made forward gives the same, and the summary says why (6 of its 8 edges change
    nothing; the rest is a clean key input whose value stays corrupted)."""
    import pandas as pd
    import torch

    from attndesk.interp import connected, load_circuit
    from attndesk.train.presets import load_preset

    out = tmp_path / "default"
    code, _lines, err = run_cli(
        capsys, "circuit", "--trained", "induction", *INDUCTION, "--draws", "1", "--out", str(out)
    )
    assert code == 0, err
    document = json.loads((out / "circuit.json").read_text())
    circuit = load_circuit(out / "circuit.json")
    run = load_preset("induction")
    clean, corrupt = [0, 5, 6, 7, 8, 5, 6], [0, 9, 10, 11, 12, 5, 6]
    m_clean, _ = circuit_metric(run, clean, 7, 11)
    m_corrupt, corrupted = circuit_metric(run, corrupt, 7, 11)
    m_circuit, _ = circuit_metric(run, clean, 7, 11, circuit, corrupted)
    with torch.no_grad():  # the hand-made clean run is the model's own forward
        logits = run.model(torch.tensor([clean]))[0][0, -1]
    assert m_clean == pytest.approx(float(logits[7] - logits[11]), abs=1e-4)
    assert document["clean_metric"] == pytest.approx(m_clean, abs=1e-4) and m_clean > 0
    assert document["corrupt_metric"] == pytest.approx(m_corrupt, abs=1e-4) and m_corrupt < m_clean
    faith = (m_circuit - m_corrupt) / (m_clean - m_corrupt)
    assert document["faithfulness"] == pytest.approx(faith, abs=1e-5) and faith < -0.1  # a true -0.14
    edges = pd.read_csv(out / "edges.csv")
    on_paths = connected(circuit, list(zip(edges.src, edges.dst, edges.kind)))
    m_paths, _ = circuit_metric(run, clean, 7, 11, on_paths, corrupted)
    assert len(on_paths) == 2 and m_paths == pytest.approx(m_circuit, abs=1e-5)  # the other 6 change nothing
    assert err[-3].startswith("attndesk: 8 of 81 edges kept, faithfulness -0.144")
    assert err[-2] == (
        "attndesk: 6 of the 8 kept edges lie on no path from the embeddings to the logits inside the circuit, "
        "so they change nothing (--connected keeps only edges on such paths)"
    )
    assert err[-1].startswith("attndesk: faithfulness below 0:")
