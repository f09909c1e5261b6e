"""The corpus pass over images: each per-image metric against an independent computation from
transformers' eager attention weights, the roles on hand-made heads, resume after a stop, and bad
input refused in one line with nothing written."""

from __future__ import annotations

import math
import threading

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from attndesk.corpus import analyze_corpus, finished_shards, open_corpus
from attndesk.corpus.image_metrics import IMAGE_METRICS, image_role, layer_metrics
from attndesk.corpus.images import open_images
from attndesk.errors import Cancelled, ConfigError

# family -> (class token, distillation token, registers), read from the model cards, not attndesk
LAYOUT = {
    "vit": (True, False, 0),
    "deit": (True, True, 0),
    "dinov2_with_registers": (True, False, 2),
    "siglip_vision_model": (False, False, 0),
}
GRID = (4, 4)  # 32 x 32 pixels in patches of 8


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """Five 32 x 32 pictures: noise, stripes and a square, saved as PNG and JPEG."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"noise{i}.png")
    stripes = np.zeros((32, 32, 3), np.uint8)
    stripes[::4] = 255
    Image.fromarray(stripes).save(folder / "stripes.jpg")
    square = np.full((32, 32, 3), 40, np.uint8)
    square[8:24, 8:24] = (250, 30, 30)
    Image.fromarray(square).save(folder / "square.png")
    return folder


def _reference(eager, folder, image_path, layout) -> list[dict]:
    """Per layer and head, the metrics computed row by row from eager attention (float64)."""
    import transformers

    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    with Image.open(image_path) as im:
        pixels = processor(images=im.convert("RGB"), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        attentions = eager(pixel_values=pixels, output_attentions=True).attentions
    cls, dist, registers = layout
    specials = int(cls) + int(dist) + registers
    rows, cols = GRID
    out = []
    for layer, attention in enumerate(attentions):
        a = attention[0].double().numpy()
        for head in range(a.shape[0]):
            values: dict[str, list] = {m: [] for m in IMAGE_METRICS}
            w = a[head]
            for q in range(rows * cols):
                row = w[specials + q]
                p = row[row > 0]
                values["entropy"].append(-(p * np.log(p)).sum())
                dist_sum = sum(
                    row[specials + k] * math.hypot(q // cols - k // cols, q % cols - k % cols)
                    for k in range(rows * cols)
                )
                values["spatial_distance"].append(dist_sum / row[specials:].sum())
                values["class_share"].append(row[0] if cls else math.nan)
                first_register = int(cls) + int(dist)
                values["sink_share"].append(row[first_register : first_register + registers].sum())
            result = {m: float(np.mean(v)) for m, v in values.items()}
            if not registers:  # the top sink: the token besides [CLS] with the most mean weight
                columns = w[specials:].mean(0)
                if cls:
                    columns[0] = -np.inf
                result["sink_share"] = float(columns.max())
            out.append({"layer": layer, "head": head, **result})
    return out


@pytest.mark.parametrize("name", list(LAYOUT))
def test_every_metric_equals_an_independent_computation_from_eager_weights(vision, image_folder, tmp_path, name):
    _model, eager, folder = vision(name)
    store = analyze_corpus(str(image_folder), tmp_path / "store", model=folder, shard_size=2)
    texts = store.texts
    assert list(texts.text) == sorted(p.name for p in image_folder.iterdir())
    per_image = store.sql("SELECT * FROM per_text ORDER BY text_id, layer, head")
    expected = []
    for text_id, image in zip(texts.text_id, texts.text):
        for row in _reference(eager, folder, image_folder / image, LAYOUT[name]):
            expected.append({"text_id": text_id, **row})
    expected_frame = pd.DataFrame(expected)
    for metric in IMAGE_METRICS:
        np.testing.assert_allclose(
            per_image[metric].to_numpy(np.float64), expected_frame[metric], rtol=1e-5, atol=2e-6, err_msg=metric
        )
    heads = store.heads
    means = expected_frame.groupby(["layer", "head"])[list(IMAGE_METRICS)].mean().reset_index()
    for metric in IMAGE_METRICS:  # every image has the same rows: the corpus figure is their mean
        np.testing.assert_allclose(heads[metric].to_numpy(np.float64), means[metric], rtol=1e-5, atol=2e-6)
    assert set(heads.role) <= {"register/sink", "global/class", "local", "broad", "mixed"}
    assert store.atlas(0, 0).empty and store.images and (heads["images"] == len(texts)).all()
    store.close()


def _layer(kind: str, specials: int = 1, registers: int = 0) -> np.ndarray:
    """One head's [N, N] weights over a 4 x 4 grid: every patch row does ``kind``."""
    patches = GRID[0] * GRID[1]
    n = specials + patches
    w = np.zeros((n, n))
    for q in range(patches):
        row = w[specials + q]
        if kind == "self":
            row[specials + q] = 1.0
        elif kind == "class":
            row[0], row[specials + q] = 0.9, 0.1
        elif kind == "registers":
            row[specials - registers : specials] = 0.8 / registers
            row[specials:] += 0.2 / patches
        elif kind == "uniform":
            row[:] = 1.0 / n
        elif kind == "far":  # all on the opposite corner
            row[specials + patches - 1 - q] = 1.0
    w[:specials, :] = 1.0 / n
    return w[None]


@pytest.mark.parametrize(
    ("kind", "tokens", "role"),
    [
        ("self", ["[CLS]"], "local"),
        ("class", ["[CLS]"], "global/class"),
        ("registers", ["[CLS]", "[REG0]", "[REG1]"], "register/sink"),
        ("uniform", ["[CLS]"], "broad"),
        ("far", ["[CLS]"], "mixed"),
    ],
)
def test_roles_follow_the_documented_rules(kind, tokens, role):
    registers = sum(t.startswith("[REG") for t in tokens)
    names = tokens + [f"({r},{c})" for r in range(GRID[0]) for c in range(GRID[1])]
    values = layer_metrics(_layer(kind, len(tokens), registers), names, GRID)
    assert image_role({k: float(v[0]) for k, v in values.items()}) == role


def test_a_head_that_looks_at_one_patch_has_that_patch_as_its_sink():
    names = ["[CLS]"] + [f"({r},{c})" for r in range(GRID[0]) for c in range(GRID[1])]
    w = np.zeros((1, 17, 17))
    w[0, :, 6] = 1.0
    values = layer_metrics(w, names, GRID)
    assert values["sink_token"][0] == 6 and values["sink_share"][0] == 1.0
    assert image_role({k: float(v[0]) for k, v in values.items()}) == "register/sink"


def test_a_stopped_image_pass_resumes_to_the_same_store(vision, image_folder, tmp_path):
    _model, _eager, folder = vision("vit")
    clean = analyze_corpus(str(image_folder), tmp_path / "clean", model=folder, shard_size=2)
    out, cancel = tmp_path / "stopped", threading.Event()

    def progress(p):
        if p.done >= 2:  # the first shard is written: stop before the second
            cancel.set()

    with pytest.raises(Cancelled):
        analyze_corpus(str(image_folder), out, model=folder, shard_size=2, progress=progress, cancel=cancel)
    assert finished_shards(out) == {0}
    with pytest.raises(ConfigError, match="did not finish"):
        open_corpus(out)
    (out / "heads.parquet").write_bytes(b"half")  # what a kill during compaction leaves
    resumed = analyze_corpus(str(image_folder), out, model=folder, shard_size=2)
    for table in ("texts", "per_text", "heads"):
        pd.testing.assert_frame_equal(
            resumed.sql(f"SELECT * FROM {table} ORDER BY ALL"), clean.sql(f"SELECT * FROM {table} ORDER BY ALL")
        )
    resumed.close()
    clean.close()


def test_bad_image_folders_are_one_line_and_write_nothing(vision, tmp_path):
    _model, _eager, folder = vision("vit")
    empty = tmp_path / "empty"
    empty.mkdir()
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "photo.png").write_text("not a picture", encoding="utf-8")
    cases = {
        empty: r"empty holds no readable image \(png, jpg\)$",
        fake: r"fake holds no readable image \(png, jpg\) \(skipped 1 file: photo.png \(does not decode: .*\)\)$",
        tmp_path / "missing": "missing: no such folder",
    }
    for images, message in cases.items():
        with pytest.raises(ConfigError, match=message) as caught:
            analyze_corpus(str(images), tmp_path / "out", model=folder)
        assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="folder of images, not texts"):
        analyze_corpus(["a text"], tmp_path / "out", model=folder)
    _swin, _eager, swin = vision("swin")
    with pytest.raises(ConfigError, match="is a Swin model: it attends inside windows"):
        analyze_corpus(None, tmp_path / "out", model=swin)
    assert not (tmp_path / "out").exists()


def test_unreadable_files_are_skipped_and_named_in_one_line(image_folder, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("noise0.png", "stripes.jpg"):
        (folder / name).write_bytes((image_folder / name).read_bytes())
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff not really")
    (folder / "readme.txt").write_text("hello", encoding="utf-8")
    source = open_images(str(folder))
    assert source.count == 2 and list(source.texts()) == [str(folder / "noise0.png"), str(folder / "stripes.jpg")]
    (line,) = source.skipped
    assert line.startswith("skipped 2 files: broken.jpg (does not decode: ") and line.endswith(
        "readme.txt (not an image)"
    )


def test_without_a_folder_the_pass_reads_the_sample_images(vision, tmp_path):
    from attndesk.models.images import sample_images

    _model, _eager, folder = vision("siglip_vision_model")
    store = analyze_corpus(None, tmp_path / "samples", model=folder)
    assert list(store.texts.text) == [s.name for s in sample_images()]
    assert store.heads.class_share.isna().all()  # SigLIP has no class token
    store.close()
