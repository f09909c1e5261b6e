"""``attndesk render --model PATH``: every family's real attention, one figure per layer (and the
decoder and cross views of encoder-decoders), whose .npy weights are run_pretrained's; bad folders
and flags are one line on stderr, a non-zero exit and no folder written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pretrained_models import CONFIGS, build, build_bare
from PySide6.QtGui import QImage

from attndesk.cli import main
from attndesk.models import load_pretrained, run_pretrained

TEXT = "the cat sat on the mat"


class Folders(dict):
    """name -> a tiny checkpoint folder, built on first use."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        self[name] = build(name, self.root / name)
        return self[name]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return Folders(tmp_path_factory.mktemp("cli-models"))


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_family_writes_each_layers_figures_and_exact_weights(qapp, capsys, tmp_path, folders, name):
    out_dir = tmp_path / "figs"
    model = load_pretrained(folders[name])
    target = ["--target", "le chat"] if model.family == "encoder-decoder" else []
    code, out, err = run_cli(
        capsys,
        "render",
        "--model",
        str(folders[name]),
        "--text",
        TEXT,
        *target,
        "--out",
        str(out_dir),
        "--which",
        "all,mean",
        "--weights",
        "npy",
    )
    assert code == 0, err
    run = run_pretrained(model, TEXT, target=target[1] if target else None)
    assert run.parts() == (("self", "decoder", "cross") if target else ("self",))
    expected = set()
    for part in run.parts():
        weights = run.part_weights(part)  # [N, H, Lq, Lk]
        for layer in range(len(weights)):
            stem = run.file_tag(layer, part=part)  # e.g. t5_layer1_cross
            expected |= {
                f"attn_all_{stem}.png",
                f"attn_all_{stem}.npy",
                f"attn_mean_{stem}.png",
                f"attn_mean_{stem}.npy",
            }
            np.testing.assert_allclose(np.load(out_dir / f"attn_all_{stem}.npy"), weights[layer], atol=1e-6)
            np.testing.assert_allclose(np.load(out_dir / f"attn_mean_{stem}.npy"), weights[layer].mean(0), atol=1e-6)
    assert {p.name for p in out_dir.iterdir()} == expected == {Path(line).name for line in out}
    image = QImage(str(out_dir / f"attn_all_{run.file_tag(0)}.png"))
    assert not image.isNull() and image.width() > 300


def test_one_layer_and_one_head(qapp, capsys, tmp_path, folders):
    code, out, err = run_cli(
        capsys,
        "render",
        "--model",
        str(folders["gemma2"]),
        "--text",
        TEXT,
        "--layer",
        "1",
        "--which",
        "2",
        "--weights",
        "npy",
        "--out",
        str(tmp_path / "one"),
    )
    assert code == 0, err
    assert sorted(Path(line).name for line in out) == ["attn_head2_gemma2_layer1.npy", "attn_head2_gemma2_layer1.png"]
    run = run_pretrained(load_pretrained(folders["gemma2"]), TEXT)
    np.testing.assert_allclose(np.load(tmp_path / "one" / "attn_head2_gemma2_layer1.npy"), run.weights[1, 2], atol=1e-6)


def test_a_bare_decoder_without_its_lm_head_renders(qapp, capsys, tmp_path):
    folder = build_bare("qwen2", tmp_path / "bare-qwen2")
    code, out, err = run_cli(
        capsys,
        "render",
        "--model",
        str(folder),
        "--text",
        TEXT,
        "--layer",
        "1",
        "--which",
        "mean",
        "--weights",
        "npy",
        "--out",
        str(tmp_path / "figs"),
    )
    assert code == 0, err
    model = load_pretrained(folder)
    assert model.headless
    run = run_pretrained(model, TEXT)
    stem = run.file_tag(1)
    assert sorted(Path(line).name for line in out) == [f"attn_mean_{stem}.npy", f"attn_mean_{stem}.png"]
    np.testing.assert_allclose(np.load(tmp_path / "figs" / f"attn_mean_{stem}.npy"), run.weights[1].mean(0), atol=1e-6)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "{missing}"], "does not exist"),
        (["--model", "{empty}"], "config.json missing"),
        (["--model", "{llama}", "--target", "hi"], "is a decoder model"),
        (["--model", "{llama}", "--layer", "2"], "--layer 2 is out of range: llama has layers 0..1"),
        (["--model", "{llama}", "--heads", "8"], "--heads sets the toy model"),
        (["--model", "{llama}", "--key-text", "b"], "--target"),
        (["--model", "{llama}", "--which", "7"], "head 7 does not exist"),
        (["--layer", "1"], "go with --model"),
    ],
)
def test_bad_folders_and_flags_are_one_line_and_write_nothing(qapp, capsys, tmp_path, folders, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = {"missing": str(tmp_path / "nowhere"), "empty": str(empty), "llama": str(folders["llama"])}
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys, "render", "--text", TEXT, *[a.format(**paths) for a in args], "--out", str(out_dir)
    )
    assert code != 0 and out == []
    assert len(err) == 1 and err[0].startswith("attndesk: error: ") and message in err[0], err
    assert not out_dir.exists()
