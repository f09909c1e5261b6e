"""``attndesk corpus``: plan, progress, the store and its heads summary (CSV + PNG); bad input is
one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import csv
import re
import threading

import pytest

from attndesk.cli import main
from attndesk.cli.corpus import SAMPLE
from attndesk.corpus import analyze_corpus, open_corpus
from attndesk.errors import Cancelled
from tests.corpus.conftest import TEXTS


def test_corpus_command_writes_the_store_and_its_heads_summary(models, tmp_path, capsys):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "store"
    code = main(
        [
            "corpus",
            "--model",
            str(models["gpt2"]),
            "--data",
            str(data),
            "--out",
            str(out),
            "--max-tokens",
            "12",
            "--atlas-points",
            "8",
            "--shard-size",
            "4",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"corpus: {len(TEXTS)} texts" in printed.out and "store: " in printed.out
    assert "texts/s" in printed.err
    with open(out / "heads.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 4 and rows[0]["role"]
    png = (out / "heads.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width > 400 and height > 100
    with open_corpus(out) as store:
        assert len(store.texts) == len(TEXTS) and len(store.atlas(1, 0)) == 16


def test_sample_corpus_is_bundled_with_repeats():
    lines = [line for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert 250 <= len(lines) <= 1000
    assert len(set(lines)) < len(lines)  # whole texts recur
    assert sum("once more" in line.lower() for line in lines) > 50  # a phrase recurs within a text


def test_bad_input_is_one_line_and_exit_2(models, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    cases = [
        ["--data", str(empty)],
        ["--data", str(tmp_path / "missing.csv")],
        ["--model", str(tmp_path), "--data", str(SAMPLE)],
        ["--atlas", "tsne"],
        ["--max-tokens", "0"],
    ]
    for extra in cases:
        out = tmp_path / "never"
        argv = (
            ["corpus", "--out", str(out)] + (["--model", str(models["bert"])] if "--model" not in extra else []) + extra
        )
        assert main(argv) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("attndesk: error:"), (extra, err)
        assert not out.exists()


def test_a_resumed_run_shows_one_time_left(models, tmp_path, capsys):
    """A resumed pass starts with part of its texts done in no time of this process: the line's time
    left is the pass's own (this run's rate), shown once, not a second estimate from the fraction."""
    data, out, cancel = tmp_path / "texts.txt", tmp_path / "store", threading.Event()
    data.write_text("\n".join(TEXTS * 2) + "\n", encoding="utf-8")

    def stop_after_one_shard(p):
        if p.done >= 4:
            cancel.set()

    with pytest.raises(Cancelled):
        analyze_corpus(
            str(data),
            out,
            model=str(models["gpt2"]),
            max_tokens=12,
            atlas_points=8,
            shard_size=4,
            atlas_methods=("pca",),
            progress=stop_after_one_shard,
            cancel=cancel,
        )
    args = ["corpus", "--model", str(models["gpt2"]), "--data", str(data), "--out", str(out)]
    code = main(args + ["--max-tokens", "12", "--atlas-points", "8", "--shard-size", "4"])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if "texts/s" in line]
    assert lines[0].startswith("corpus:  50% analyzing: 8/16 texts (")  # the first shard of the resumed run
    for line in lines:
        assert line.count("left") <= 1, line
    # the one time left is this run's: 8 texts to go at its rate
    rate, minutes, seconds = re.search(
        r"\(([\d.,]+) texts/s\), \d+:\d\d elapsed, about (\d+):(\d\d) left$", lines[0]
    ).groups()
    assert abs(int(minutes) * 60 + int(seconds) - 8 / float(rate.replace(",", ""))) <= 1.1


def test_corpus_over_a_folder_of_images(vision, tmp_path, capsys):
    import numpy as np
    from PIL import Image

    _model, _eager, model = vision("dinov2_with_registers")
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(images / f"p{i}.png")
    (images / "notes.txt").write_text("not an image", encoding="utf-8")
    out = tmp_path / "store"
    code = main(["corpus", "--model", str(model), "--images", str(images), "--out", str(out), "--shard-size", "2"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "corpus: 3 images from" in printed.out and "skipped 1 file: notes.txt (not an image)" in printed.out
    assert "images/s" in printed.err and "roles: " in printed.out
    with open(out / "heads.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 4 and {"spatial_distance", "class_share", "sink_share", "entropy"} <= set(rows[0])
    assert (out / "heads.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open_corpus(out) as store:
        assert list(store.texts.text) == ["p0.png", "p1.png", "p2.png"] and store.images
    # the interactive page draws texts' attention: an image store's is refused in one line
    page = tmp_path / "page"
    assert main(["render", "--store", str(out), "--format", "html", "--out", str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an image pass's store" in err[0] and not page.exists()


def test_image_and_text_flags_are_refused_across_kinds(models, vision, tmp_path, capsys):
    _model, _eager, vit = vision("vit")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "photo.png").write_text("not a picture", encoding="utf-8")
    cases = {
        ("--model", str(vit), "--images", str(fake)): "holds no readable image (png, jpg) (skipped 1 file: photo.png",
        ("--model", str(vit), "--images", str(tmp_path / "none")): "none: no such folder",
        ("--model", str(vit), "--data", str(SAMPLE)): "--data does not apply to an image model",
        ("--model", str(vit), "--max-tokens", "8"): "--max-tokens does not apply to an image model",
        ("--model", str(vit), "--atlas", "pca"): "--atlas does not apply to an image model",
        ("--model", str(models["bert"]), "--images", str(fake)): "--images needs a vision model",
    }
    for extra, message in cases.items():
        out = tmp_path / "never"
        assert main(["corpus", "--out", str(out), *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (extra, err)
        assert not out.exists()
