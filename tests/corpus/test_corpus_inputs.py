"""Every corpus format gives the same texts; bad input is one ConfigError line and writes nothing."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attndesk.corpus import analyze_corpus
from attndesk.corpus.sources import MAX_TEXT_CHARS, open_source
from attndesk.errors import ConfigError
from tests.corpus.conftest import TEXTS


def _formats(folder) -> dict:
    (folder / "c.txt").write_text("\n".join(TEXTS[:3]) + "\n\n", encoding="utf-8")
    (folder / "c.jsonl").write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(TEXTS[:3])))
    with open(folder / "c.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text"])
        writer.writerows([[i, t] for i, t in enumerate(TEXTS[:3])])
    pq.write_table(pa.table({"text": TEXTS[:3]}), folder / "c.parquet")
    (folder / "docs").mkdir()
    for i, t in enumerate(TEXTS[:3]):
        (folder / "docs" / f"{i:02d}.txt").write_text(t + "\n", encoding="utf-8")
    return {name: folder / name for name in ("c.txt", "c.jsonl", "c.csv", "c.parquet", "docs")}


def test_every_format_gives_the_same_texts(tmp_path):
    sources = {name: open_source(path) for name, path in _formats(tmp_path).items()}
    sources["list"] = open_source(TEXTS[:3])
    sources["generator"] = open_source(t for t in TEXTS[:3])
    for name, source in sources.items():
        assert list(source.texts()) == TEXTS[:3], name
        assert source.count == 3


def _bad_inputs(tmp_path) -> dict:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0IHDR" * 10)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "notext.jsonl").write_text('{"body": "x"}\n')
    (tmp_path / "notext.csv").write_text("id,body\n1,x\n")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "notext.parquet")
    with open(tmp_path / "huge.txt", "w") as fh:  # one line over the limit: refused after the limit is read
        fh.write("word " * (MAX_TEXT_CHARS // 5 + 10))
    return {
        "empty.txt": "is empty",
        "blank.txt": "no non-empty text",
        "binary.txt": "binary",
        "latin1.txt": "not UTF-8",
        "notext.jsonl": 'no "text" field',
        "notext.csv": 'no "text" column',
        "notext.parquet": 'no "text" column',
        "huge.txt": "over 1,048,576 characters",
        "missing.txt": "no such file",
        "data.bin": "a .txt, .jsonl",
    }


def test_bad_corpora_are_refused_before_anything_is_written(models, tmp_path):
    (tmp_path / "data.bin").write_bytes(b"x")
    for name, message in _bad_inputs(tmp_path).items():
        out = tmp_path / f"out-{name}"
        with pytest.raises(ConfigError, match=message):
            analyze_corpus(tmp_path / name, out, model=models["bert"])
        assert not out.exists(), name
    with pytest.raises(ConfigError, match="no non-empty text"):
        analyze_corpus(["", "  "], tmp_path / "out", model=models["bert"])


def test_bad_models_and_out_folders_are_refused(models, tmp_path):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match=r"config\.json"):
        analyze_corpus(TEXTS, tmp_path / "out1", model=not_a_model)
    assert not (tmp_path / "out1").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("mine")
    with pytest.raises(ConfigError, match="holds other files"):
        analyze_corpus(TEXTS, busy, model=models["bert"])
    assert [p.name for p in busy.iterdir()] == ["thesis.tex"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        analyze_corpus(TEXTS, tmp_path / "file", model=models["bert"])
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(ConfigError, match="not an attndesk corpus manifest"):
        analyze_corpus(TEXTS, tmp_path / "fake", model=models["bert"])
    with pytest.raises(
        ConfigError, match=r"cannot write the store folder /proc/self/x/y: the folder /proc/self/x does"
    ):
        analyze_corpus(TEXTS, "/proc/self/x/y", model=models["bert"])  # one line, no folder made above it
    with pytest.raises(ConfigError, match="cannot write the store folder /proc/self/attndesk-cannot"):
        analyze_corpus(TEXTS, "/proc/self/attndesk-cannot-write-here", model=models["bert"])  # no OSError
    for bad, message in (
        (dict(max_tokens=1), "max_tokens"),
        (dict(engine="spark"), "engine"),
        (dict(atlas_methods=("tsne",)), "atlas method"),
        (dict(workers=0), "workers"),
    ):
        with pytest.raises(ConfigError, match=message):
            analyze_corpus(TEXTS, tmp_path / "out2", model=models["bert"], **bad)
    assert not (tmp_path / "out2").exists()


def test_texts_for_an_image_model_are_refused_in_one_line(vision, tmp_path):
    model, _eager, folder = vision("vit")
    for given in (folder, model):  # a folder before its weights are read, and a loaded model
        with pytest.raises(
            ConfigError, match=r"is an image model: the corpus pass gives it a folder of images, not texts"
        ):
            analyze_corpus(TEXTS, tmp_path / "out", model=given)
    assert not (tmp_path / "out").exists()
