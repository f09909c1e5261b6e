"""Writing never damages what is there: an export that fails midway keeps the old file; an output
set (the CLI's folder of figures) lands whole or not at all, also when a move fails halfway."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from attndesk.cli import main, render_job
from attndesk.core import AttentionConfig, run_attention
from attndesk.files.atomic import STAGING_PREFIX, StagedFolder, current_umask
from attndesk.render import export
from attndesk.render.export import ExportError, OutputSet, export_figure, export_weights
from attndesk.render.figure import figure_from_map

FULL = OSError(errno.ENOSPC, "No space left on device")
NAMES = [
    "attn_all_h4_e64_padding_scaled_seed0.png",
    "attn_head0_h4_e64_padding_scaled_seed0.csv",
    "attn_head1_h4_e64_padding_scaled_seed0.csv",
    "attn_head2_h4_e64_padding_scaled_seed0.csv",
    "attn_head3_h4_e64_padding_scaled_seed0.csv",
]


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every entry under ``folder`` (hidden ones too) with its bytes."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def old_folder(tmp_path) -> Path:
    """An output folder from an earlier run: the same names with other contents, and a note of the user's."""
    folder = tmp_path / "figs"
    folder.mkdir()
    for name in NAMES:
        (folder / name).write_bytes(f"old {name}".encode())
    (folder / "notes.txt").write_text("mine")
    return folder


def _render(folder: Path, *extra: str) -> int:
    return main(
        [
            "render",
            "--text",
            "the cat sat",
            "--which",
            "all",
            "--weights",
            "csv",
            "--size",
            "400x300",
            "--out",
            str(folder),
            *extra,
        ]
    )


def test_a_run_into_a_folder_with_files_is_refused_and_leaves_it_as_it_was(qapp, capsys, old_folder):
    before = _snapshot(old_folder)
    assert _render(old_folder) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "choose an empty or new folder" in err
    assert _snapshot(old_folder) == before


def test_a_run_into_an_empty_folder_lands_whole(qapp, capsys, tmp_path):
    folder = tmp_path / "figs"
    folder.mkdir()
    assert _render(folder) == 0
    out, _err = capsys.readouterr()
    assert [Path(p).name for p in out.splitlines()] == sorted(NAMES)  # printed once all are in place
    assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES)
    assert (folder / NAMES[0]).stat().st_mode & 0o777 == 0o666 & ~current_umask()


@pytest.mark.parametrize("failure", [ExportError("cannot write x.csv: No space left on device"), KeyboardInterrupt()])
def test_a_run_that_fails_midway_leaves_the_folder_as_it_was(qapp, capsys, tmp_path, monkeypatch, failure):
    old_folder = tmp_path / "figs"
    old_folder.mkdir()
    before = _snapshot(old_folder)
    real = export.export_weights
    calls = []

    def third_file_fails(*args, **kwargs):
        calls.append(args[-1])
        if len(calls) == 3:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(render_job, "export_weights", third_file_fails)  # what the command calls
    code = _render(old_folder)
    out, err = capsys.readouterr()
    assert len(calls) == 3  # two CSVs and the PNG were written (into the staging folder) first
    assert code == (130 if isinstance(failure, KeyboardInterrupt) else 1)
    assert out == "" and len(err.splitlines()) == 1
    assert _snapshot(old_folder) == before  # same files, same bytes, no staging folder left
    assert sorted(p.name for p in old_folder.parent.iterdir()) == ["figs"]


def test_a_failing_run_into_a_new_folder_creates_nothing(qapp, capsys, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ExportError("cannot write: No space left on device")

    monkeypatch.setattr(render_job, "export_weights", broken)
    assert _render(tmp_path / "a" / "b" / "figs") == 1
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its parents


def test_a_new_nested_folder_appears_whole(qapp, capsys, tmp_path):
    target = tmp_path / "a" / "b" / "figs"
    assert _render(target) == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(NAMES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    assert target.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # not the staging folder's private 0700


def _staged(target: Path, names: list[str]) -> StagedFolder:
    stage = StagedFolder(target).__enter__()
    for name in names:
        stage.path(name).write_bytes(f"new {name}".encode())
    return stage


@pytest.mark.parametrize("fail_on", [1, 2, 3, 4, 6])
def test_a_move_that_fails_halfway_is_rolled_back(old_folder, monkeypatch, fail_on):
    before = _snapshot(old_folder)
    stage = _staged(old_folder, NAMES)
    real = os.replace
    count = [0]

    def replace(src, dst):
        count[0] += 1
        if count[0] == fail_on:  # setting an old file aside, or moving a new one in
            raise FULL
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        stage.commit()
    stage.discard()
    monkeypatch.undo()
    assert _snapshot(old_folder) == before


def test_a_commit_moves_everything(old_folder):
    stage = _staged(old_folder, NAMES + ["extra.png"])
    committed = stage.commit()
    stage.discard()
    assert committed == [old_folder / n for n in sorted(NAMES + ["extra.png"])]
    assert all((old_folder / n).read_bytes() == f"new {n}".encode() for n in NAMES + ["extra.png"])
    assert not any(p.name.startswith(STAGING_PREFIX) for p in old_folder.iterdir())


def test_a_folder_in_place_of_a_file_is_refused_before_anything_moves(old_folder):
    (old_folder / "sub.png").mkdir()
    before = _snapshot(old_folder)
    with pytest.raises(IsADirectoryError), StagedFolder(old_folder) as stage:
        for name in NAMES + ["sub.png"]:
            stage.path(name).write_bytes(b"new")
    assert _snapshot(old_folder) == before


def test_an_output_set_into_a_file_says_so(tmp_path):
    blocker = tmp_path / "figs"
    blocker.write_text("x")
    with pytest.raises(ExportError, match="is a file, not a folder"), OutputSet(blocker):
        pass


@pytest.fixture
def figure():
    return figure_from_map(
        run_attention(AttentionConfig(num_heads=2, embed_dim=8), "the cat sat").attention_map(), "all"
    )


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_an_export_that_fails_midway_keeps_the_old_file(qapp, tmp_path, monkeypatch, figure, step):
    for name, write in (
        ("f.png", lambda p: export_figure(figure, p, size=(300, 200))),
        ("w.csv", lambda p: export_weights(figure.matrices[0], figure.query_labels, figure.key_labels, p)),
    ):
        path = tmp_path / name
        path.write_bytes(b"the previous export")

        def fail(*args):
            raise FULL

        monkeypatch.setattr(os, step, fail)
        with pytest.raises(ExportError, match=f"cannot write .*{name}: No space left on device"):
            write(path)
        monkeypatch.undo()
        assert path.read_bytes() == b"the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "w.csv"]  # no temporary file left


def test_a_large_csv_streams_and_reads_back_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "CSV_CHUNK_CELLS", 64)  # many chunks for a small matrix
    rng = np.random.default_rng(0)
    matrix = rng.random((37, 11), dtype=np.float32)
    labels_q, labels_k = [f"q{i}" for i in range(37)], [f"k,{i}" for i in range(11)]
    path = export_weights(matrix, labels_q, labels_k, tmp_path / "w.csv")
    text = path.read_text()
    assert text == export.weights_csv_text(matrix, labels_q, labels_k)
    rows = text.splitlines()
    assert len(rows) == 38 and rows[0].startswith('query \\ key,"k,0"')
    values = np.array([[np.float32(v) for v in r.split(",")[1:]] for r in rows[1:]], dtype=np.float32)
    np.testing.assert_array_equal(values, matrix)
