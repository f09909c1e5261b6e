"""``attndesk render --format html``: one page per run beside the same run's .npy weights."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from attndesk.cli import main
from attndesk.render.page import decode_array, decode_mask, page_layers, read_page_data
from tests.cli.cli_models import tiny_model


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_toy_page_beside_its_npy(qapp, capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        "render",
        "--text",
        "the cat sat on the mat",
        "--heads",
        "2",
        "--embed-dim",
        "8",
        "--mask",
        "causal",
        "--format",
        "html",
        "--weights",
        "npy",
        "--which",
        "all",
        "--page-precision",
        "float32",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    names = sorted(Path(p).name for p in out)
    assert names == ["attn_all_h2_e8_causal_scaled_seed0.html", "attn_all_h2_e8_causal_scaled_seed0.npy"]
    doc = read_page_data(tmp_path / names[0])
    npy = np.load(tmp_path / names[1])
    np.testing.assert_array_equal(decode_array(doc["weights"]), npy)  # float32: exactly the .npy
    assert not decode_mask(doc["mask"])[0, 1] and doc["settings"]["mask"] == "causal"


@pytest.fixture(scope="module")
def models():
    return {name: tiny_model(name) for name in ("llama", "t5")}


def test_model_page_holds_every_layer_as_the_npy_files(qapp, capsys, tmp_path, models):
    code, out, err = run_cli(
        capsys,
        "render",
        "--model",
        str(models["llama"]),
        "--text",
        "the cat sat on the mat",
        "--format",
        "html",
        "--weights",
        "npy",
        "--which",
        "all",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    pages = [Path(p) for p in out if p.endswith(".html")]
    assert len(pages) == 1 and len(out) == 3  # one page for the run, an .npy per layer
    layers = page_layers(read_page_data(pages[0]))
    assert [(e["part"], e["layer"]) for e in layers] == [("self", 0), ("self", 1)]
    for entry in layers:
        npy = np.load(tmp_path / f"attn_all_llama_layer{entry['layer']}.npy")
        assert decode_array(entry["weights"]).shape == npy.shape
        assert np.abs(decode_array(entry["weights"]) - npy).max() <= 1e-3
        assert entry["kv_heads"] == 2


def test_encoder_decoder_page_has_its_three_parts(qapp, capsys, tmp_path, models):
    code, out, err = run_cli(
        capsys,
        "render",
        "--model",
        str(models["t5"]),
        "--text",
        "the cat sat",
        "--target",
        "le chat",
        "--format",
        "html",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    layers = page_layers(read_page_data(Path(out[0])))
    assert [(e["part"], e["layer"]) for e in layers] == [(p, n) for p in ("self", "decoder", "cross") for n in (0, 1)]
    cross = layers[-1]
    assert len(cross["queries"]) != len(cross["keys"]) or cross["queries"] != cross["keys"]


def test_a_run_too_large_for_a_page_is_refused_naming_what_fits(qapp, capsys, tmp_path):
    text = " ".join(["the cat sat on the mat"] * 100)  # 600 tokens
    code, out, err = run_cli(
        capsys,
        "render",
        "--text",
        text,
        "--format",
        "html,png",
        "--page-precision",
        "float32",
        "--out",
        str(tmp_path / "figs"),
    )
    assert code == 2 and out == []
    errors = [line for line in err if "error" in line]
    assert errors == err[-1:] and "what fits" in err[-1] and "float16" in err[-1]
    assert not (tmp_path / "figs").exists()


def test_an_out_folder_that_cannot_be_written_is_one_line(qapp, capsys, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    blocked.chmod(0o500)
    target = blocked / "figs" if os.geteuid() != 0 else Path("/proc/attndesk-cannot-write")  # root ignores modes
    try:
        code, out, err = run_cli(capsys, "render", "--text", "a b c", "--format", "html", "--out", str(target))
    finally:
        blocked.chmod(0o700)
    assert code != 0 and out == [] and len(err) == 1 and "cannot write" in err[0]
    assert not target.exists()


def test_an_overview_page_of_a_long_run_fits_in_4_mb(qapp, capsys, tmp_path):
    text = " ".join(["the cat sat on the mat"] * 200)  # 1,200 tokens
    args = ["render", "--text", text, "--heads", "2", "--embed-dim", "8", "--mask", "causal", "--format", "html"]
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "refused"))
    assert code == 2 and "--page-overview" in err[-1]
    for extra, said in ((["--format", "png", "--page-overview"], "--format html"), (["--texts", "3"], "--store")):
        code, out, err = run_cli(capsys, *args, *extra, "--out", str(tmp_path / "refused"))
        assert code == 2 and said in err[-1] and out == []
    assert not (tmp_path / "refused").exists()
    code, out, err = run_cli(capsys, *args, "--page-overview", "--region", "600:650,560:650", "--out", str(tmp_path))
    assert code == 0, err
    (path,) = map(Path, out)
    assert path.name.endswith("_q600-650_k560-650.html") and path.stat().st_size <= 4_000_000
    doc = read_page_data(path)
    assert doc["overview"]["rows"] == 1200 and doc["first_query"] == 600 and len(doc["keys"]) == 90
