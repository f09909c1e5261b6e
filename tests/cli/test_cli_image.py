"""``attndesk render --model PATH --image FILE``: the overlays of a vision model's attention as
PNG/SVG, the weights as run_pretrained's; bad input is one line on stderr, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtGui import QImage

from attndesk.cli import main
from attndesk.cli.render_image import parse_query
from attndesk.errors import ConfigError
from attndesk.models import run_pretrained


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture
def picture(tmp_path, image):
    path = tmp_path / "picture.png"
    Image.fromarray(image).save(path)
    return path


def test_overlays_and_weights(qapp, capsys, tmp_path, vision, picture):
    model, _, folder = vision("deit")
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys, "render", "--model", str(folder), "--image", str(picture), "--format", "png,svg",
        "--weights", "npy", "--query", "[DIST]", "--maps", "rollout,chefer", "--out", str(out_dir),
    )  # fmt: skip
    assert code == 0, err
    stem = f"{folder.name}_picture"
    names = sorted(p.rsplit("/", 1)[-1] for p in out)
    expected = [
        f"{stem}_{part}.{fmt}"
        for part in ("all_heads", "heads_layer0", "heads_layer1", "maps")
        for fmt in ("png", "svg")
    ]
    assert names == sorted([*expected, f"{stem}_weights.npy"])
    np.testing.assert_array_equal(np.load(out_dir / f"{stem}_weights.npy"), run_pretrained(model, picture).weights)
    grid = QImage(str(out_dir / f"{stem}_all_heads.png"))
    assert not grid.isNull() and grid.width() > 4 * 180  # four heads side by side
    assert (out_dir / f"{stem}_maps.svg").read_text().count("<image") >= 3  # the picture and two maps


def test_swin_draws_its_first_stage_and_the_maps_that_apply(qapp, capsys, tmp_path, vision, picture):
    _, _, folder = vision("swin")
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys, "render", "--model", str(folder), "--image", str(picture), "--ig-steps", "2", "--out", str(out_dir)
    )
    assert code == 0, err
    assert len(out) == 4  # heads of the first stage's two layers, every head, the maps (class, ig)
    code, _, err = run_cli(
        capsys,
        "render",
        "--model",
        str(folder),
        "--image",
        str(picture),
        "--maps",
        "rollout",
        "--out",
        str(tmp_path / "x"),
    )
    assert code == 2 and len(err) == 1 and "Swin's token grid" in err[0] and not (tmp_path / "x").exists()


def test_refusals_are_one_line_and_write_nothing(qapp, capsys, tmp_path, vision, picture):
    _, _, folder = vision("vit")
    text_model = tmp_path / "bert"
    from pretrained_models import build

    build("bert", text_model)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    out_dir = tmp_path / "out"
    cases = {
        "--image goes with --model": ["--image", str(picture)],
        "is a text model": ["--model", str(text_model), "--image", str(picture)],
        "cannot be read as an image": ["--model", str(folder), "--image", str(broken)],
        "does not exist": ["--model", str(folder), "--image", str(tmp_path / "missing.png")],
        "no token of this image": ["--model", str(folder), "--image", str(picture), "--query", "[DIST]"],
        "this model has none": ["--model", str(folder), "--image", str(picture), "--maps", "probe"],
        "--which does not go with --image": ["--model", str(folder), "--image", str(picture), "--which", "mean"],
        "--query goes with --image": ["--model", str(folder), "--text", "a cat", "--query", "0"],
        "give it an image": ["--model", str(folder), "--text", "a cat"],
        "--opacity must lie between 0 and 1": ["--model", str(folder), "--image", str(picture), "--opacity", "2"],
    }
    for words, flags in cases.items():
        code, out, err = run_cli(capsys, "render", *flags, "--out", str(out_dir))
        assert code == 2 and out == [] and len(err) == 1 and words in err[0], (words, err)
        assert not out_dir.exists()


def test_query_names():
    tokens = ["[CLS]", "[REG0]", "(0,0)", "(0,1)"]
    assert parse_query("[cls]", tokens, 0) == 0
    assert parse_query("(0, 1)", tokens, 0) == 3
    assert parse_query("2", tokens, 0) == 2
    assert parse_query(None, tokens, None) is None
    with pytest.raises(ConfigError, match=r"tokens 0\.\.3"):
        parse_query("9", tokens, 0)


def test_html_page_holds_the_maps_and_the_overlays(qapp, capsys, tmp_path, vision, picture):
    from attndesk.render.page import decode_array, page_layers, read_page_data

    model, _, folder = vision("vit")
    out_dir = tmp_path / "out"
    code, out, err = run_cli(
        capsys, "render", "--model", str(folder), "--image", str(picture), "--format", "html", "--maps", "rollout",
        "--out", str(out_dir),
    )  # fmt: skip
    assert code == 0 and len(out) == 1 and out[0].endswith(".html"), err
    doc = read_page_data(out[0])
    assert doc["image"]["grid"] == [4, 4] and len(doc["image"]["figures"]) == 4  # two layers, every head, the maps
    layers = page_layers(doc)
    expected = run_pretrained(model, picture).weights
    assert len(layers) == 2 and layers[0]["keys"][:2] == ["[CLS]", "(0,0)"]
    np.testing.assert_array_equal(decode_array(layers[1]["weights"]), expected[1])


def test_a_page_and_pngs_paint_each_figure_once(qapp, capsys, tmp_path, vision, picture, monkeypatch):
    """--format html,png: the PNG files and the page's pictures are the same bytes, painted once."""
    import base64

    from attndesk.cli import render_image
    from attndesk.render import export
    from attndesk.render.page import read_page_data

    _, _, folder = vision("vit")
    painted = []
    real = render_image.render_bytes

    def counting(*args, **kwargs):
        painted.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(render_image, "render_bytes", counting)
    monkeypatch.setattr(export, "render_bytes", counting)  # what export.write paints with
    code, out, err = run_cli(
        capsys, "render", "--model", str(folder), "--image", str(picture), "--format", "html,png", "--maps", "rollout",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    pngs = sorted(p for p in out if p.endswith(".png"))
    page = next(p for p in out if p.endswith(".html"))
    assert painted == ["png"] * len(pngs) == ["png"] * 4  # two layers, every head, the maps
    pictures = sorted(base64.b64decode(f["png"]) for f in read_page_data(page)["image"]["figures"])
    assert pictures == sorted(Path(p).read_bytes() for p in pngs)


def test_siglip_draws_its_pooling_probe(qapp, capsys, tmp_path, vision, picture):
    _, _, folder = vision("siglip_vision_model")
    code, out, err = run_cli(
        capsys, "render", "--model", str(folder), "--image", str(picture), "--maps", "probe,class", "--layer", "1",
        "--format", "svg", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    maps = next(p for p in out if p.endswith("_maps.svg"))
    text = Path(maps).read_text(encoding="utf-8")
    assert "pooling probe" in text and "the mean over the patches" in text


def test_bundle_holds_the_image_and_reproduce_runs_it_again(qapp, capsys, tmp_path, vision, picture):
    import json
    import shutil
    import zipfile
    from io import BytesIO

    from attndesk.session.bundle import read_bundle

    _, _, built = vision("vit")
    folder = tmp_path / "vit"
    shutil.copytree(built, folder)  # the test changes the folder's processor below
    zipped = tmp_path / "vit.zip"
    code, out, err = run_cli(capsys, "bundle", "--model", str(folder), "--image", str(picture), "--out", str(zipped))
    assert code == 0 and out == [str(zipped)], err
    bundle = read_bundle(zipped)
    with Image.open(picture) as original:
        decoded = np.asarray(original.convert("RGB"))
    with Image.open(BytesIO(bundle.inputs["image.png"])) as stored:
        np.testing.assert_array_equal(np.asarray(stored), decoded)
    assert sorted(bundle.weights) == ["weights/self_layer0.npy", "weights/self_layer1.npy"]
    assert any(name.endswith("_all_heads.png") for name in zipfile.ZipFile(zipped).namelist())
    code, out, err = run_cli(capsys, "reproduce", str(zipped))
    assert code == 0 and "on the bundled image" in out[0] and out[-1].endswith(": 0"), (out, err)
    processor = folder / "preprocessor_config.json"
    processor.write_text(json.dumps({**json.loads(processor.read_text()), "image_mean": [0.1, 0.2, 0.3]}))
    code, _, err = run_cli(capsys, "reproduce", str(zipped))
    assert code == 2 and len(err) == 1 and "image processor" in err[0]
    code, _, err = run_cli(capsys, "bundle", "--model", str(folder), "--query", "0", "--out", str(tmp_path / "x.zip"))
    assert code == 2 and "--query goes with --image" in err[0] and not (tmp_path / "x.zip").exists()
