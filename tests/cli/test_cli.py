"""``attndesk render`` and ``main.py``: files written, one-line errors, the no-display fallback."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

from attndesk.cli import main, read_text_file
from attndesk.core import AttentionConfig, run_attention
from attndesk.files.textfile import MAX_TEXT_BYTES

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_render_writes_every_requested_file(qapp, capsys, tmp_path):
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
        "--out",
        str(tmp_path / "figs"),
        "--format",
        "png,svg",
        "--which",
        "all,1",
        "--size",
        "700x500",
        "--weights",
        "csv",
        "--seed",
        "3",
    )
    assert code == 0, err
    paths = [Path(line) for line in out]
    stem = "_h2_e8_causal_scaled_seed3"
    expected_names = {
        f"attn_all{stem}.png",
        f"attn_all{stem}.svg",
        f"attn_head1{stem}.png",
        f"attn_head1{stem}.svg",
        f"attn_head0{stem}.csv",
        f"attn_head1{stem}.csv",  # "all" writes one CSV per head
    }
    assert {p.name for p in paths} == expected_names
    assert all(p.is_file() for p in paths)
    assert {p.name for p in (tmp_path / "figs").iterdir()} == expected_names
    image = QImage(str(tmp_path / "figs" / "attn_all_h2_e8_causal_scaled_seed3.png"))
    assert (image.width(), image.height()) == (700, 500)
    ET.parse(tmp_path / "figs" / "attn_head1_h2_e8_causal_scaled_seed3.svg")
    # the CSV holds exactly the core's numbers for the same settings
    expected = run_attention(AttentionConfig(embed_dim=8, num_heads=2, mask="causal", seed=3), "the cat sat on the mat")
    rows = (tmp_path / "figs" / "attn_head1_h2_e8_causal_scaled_seed3.csv").read_text().splitlines()
    values = np.array([[np.float32(v) for v in r.split(",")[1:]] for r in rows[1:]], dtype=np.float32)
    np.testing.assert_array_equal(values, expected.weights[1])


def test_npy_weights_and_text_file(qapp, capsys, tmp_path):
    text = tmp_path / "doc.txt"
    text.write_text("\ufeffIl \u00e9tait une fois, un chat.", encoding="utf-8")
    code, out, err = run_cli(
        capsys,
        "render",
        "--text-file",
        str(text),
        "--which",
        "mean",
        "--weights",
        "npy",
        "--out",
        str(tmp_path / "out"),
        "--format",
        "pdf",
        "--size",
        "600x500",
        "--heads",
        "1",
        "--mask",
        "none",
    )
    assert code == 0, err
    npy = [Path(p) for p in out if p.endswith(".npy")]
    assert len(npy) == 1
    expected = run_attention(AttentionConfig(num_heads=1, mask="none"), "Il \u00e9tait une fois, un chat.")
    np.testing.assert_array_equal(np.load(npy[0]), expected.weights[0])
    assert any(p.endswith(".pdf") and Path(p).read_bytes().startswith(b"%PDF") for p in out)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--heads", "6"], "valid head counts"),
        (["--heads", "many"], "--heads"),
        (["--mask", "diagonal"], "--mask"),
        (["--dropout", "1.5"], "dropout"),
        (["--which", "7"], "head 7"),
        (["--size", "big"], "WIDTHxHEIGHT"),
        (["--size", "4x4"], "out of range"),
        (["--format", "gif"], "gif"),
        (["--text", "   "], "type some text"),
        (["--region", "0:99,0:2"], "outside"),
        (["--no-such-flag"], "unrecognized"),
        (["--vmin", "0.5", "--vmax", "0.1"], "--vmin"),
    ],
)
def test_bad_values_give_one_line_and_no_file(qapp, capsys, tmp_path, args, fragment):
    out_dir = tmp_path / "out"
    code, _out, err = run_cli(capsys, "render", "--out", str(out_dir), "--text", "a b c", *args)
    assert code != 0
    assert len(err) == 1 and err[0].startswith("attndesk: error:") and fragment in err[0], err
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_text_files_that_are_not_text_are_refused(tmp_path):
    binary = tmp_path / "image.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    with pytest.raises(ValueError, match="binary"):
        read_text_file(binary)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\u00e9 cr\u00e8me".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        read_text_file(latin)
    big = tmp_path / "big.txt"
    big.write_bytes(b"word " * (MAX_TEXT_BYTES // 5 + 1))
    with pytest.raises(ValueError, match="up to 1"):
        read_text_file(big)
    with pytest.raises(ValueError, match="no such file"):
        read_text_file(tmp_path / "missing.txt")
    ok = tmp_path / "ok.txt"
    ok.write_bytes(b"word " * (MAX_TEXT_BYTES // 5))  # exactly at the limit is fine
    assert read_text_file(ok).startswith("word word")


def test_help_documents_every_flag(capsys):
    code, out, _ = run_cli(capsys, "render", "--help")
    assert code == 0
    text = "\n".join(out)
    for flag in (
        "--text",
        "--text-file",
        "--heads",
        "--embed-dim",
        "--hidden-dim",
        "--mask",
        "--no-scale",
        "--no-positional",
        "--dropout",
        "--train",
        "--seed",
        "--device",
        "--dtype",
        "--pad-to",
        "--vocab-size",
        "--no-bias",
        "--memory-budget",
        "--out",
        "--format",
        "--which",
        "--colormap",
        "--per-head-scale",
        "--size",
        "--dpi",
        "--weights",
        "--region",
        "--key-text",
        "--kv-heads",
        "--position",
        "--window",
        "--softcap",
    ):
        assert flag in text, flag


def _env_without_display(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["PYTHONPATH"] = str(ROOT)
    env["HOME"] = str(tmp_path)  # keep any settings away from the user's
    return env


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the no-display fallback is for Linux")
def test_main_py_without_display_renders_headless(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "main.py")],
        cwd=tmp_path,
        env=_env_without_display(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert "no display" in lines[0]
    folder = Path(lines[-1])
    assert folder == (tmp_path / "render-out").resolve()
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert len(pngs) == 2 and pngs[0].startswith("attn_all_") and pngs[1].startswith("attn_mean_")
    image = QImage(str(folder / pngs[0]))
    assert image.width() > 500 and image.height() > 500


def test_python_dash_m_bad_value_exits_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "attndesk", "render", "--heads", "5", "--out", str(tmp_path / "o")],
        cwd=tmp_path,
        env=_env_without_display(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "valid head counts" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "o").exists()


def test_binary_text_file_is_refused_in_one_line(capsys, tmp_path):
    binary = tmp_path / "photo.jpg"
    binary.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    code, out, err = run_cli(capsys, "render", "--text-file", str(binary), "--out", str(tmp_path / "o"))
    assert code == 2 and out == []
    assert len(err) == 1 and "binary" in err[0]
    assert not (tmp_path / "o").exists()


def test_over_budget_run_writes_the_overview_and_exact_regions(qapp, capsys, tmp_path):
    text = " ".join(f"w{i % 40}" for i in range(600))
    common = [
        "render",
        "--text",
        text,
        "--heads",
        "2",
        "--embed-dim",
        "8",
        "--mask",
        "causal",
        "--memory-budget",
        "256K",
        "--size",
        "600x500",
    ]
    code, out, err = run_cli(capsys, *common, "--which", "mean", "--out", str(tmp_path / "mean"))
    assert code == 0, err
    assert any("overview" in line or "budget" in line for line in err)  # the core's notice
    assert QImage(out[0]).width() == 600
    # raw numbers of the whole matrix do not exist: refused before anything is written
    code, out, err = run_cli(capsys, *common, "--which", "0", "--weights", "npy", "--out", str(tmp_path / "n"))
    assert code == 2 and len(err) == 1 and "--region" in err[0] and not (tmp_path / "n").exists()
    # a region is exact: equal to the full run's weights (a budget large enough to keep them)
    code, out, err = run_cli(
        capsys,
        *common,
        "--which",
        "1",
        "--weights",
        "npy",
        "--region",
        "500:520,480:510",
        "--out",
        str(tmp_path / "region"),
    )
    assert code == 0, err
    region = np.load(next(p for p in out if p.endswith(".npy")))
    full = run_attention(AttentionConfig(embed_dim=8, num_heads=2, mask="causal"), text)
    np.testing.assert_allclose(region, full.weights[1, 500:520, 480:510], rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X display sockets are checked on Linux")
def test_stale_display_is_detected_and_a_live_one_is_not(monkeypatch):
    import socket

    from attndesk.render import display_problem

    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    number = 4000 + os.getpid() % 1000
    monkeypatch.setenv("DISPLAY", f":{number}")
    assert "no X server" in display_problem()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(f"\0/tmp/.X11-unix/X{number}")  # an abstract socket, as X servers also offer
        server.listen(1)
        assert display_problem() is None
    finally:
        server.close()
    monkeypatch.setenv("DISPLAY", "remotehost:0")
    assert display_problem() is None  # remote displays are left to Qt


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the no-display fallback is for Linux")
def test_main_py_with_a_stale_display_falls_back(tmp_path):
    env = _env_without_display(tmp_path)
    env["DISPLAY"] = f":{5000 + os.getpid() % 1000}"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "main.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no X server answers" in proc.stdout.splitlines()[0] and "Traceback" not in proc.stderr
    assert len(list((tmp_path / "render-out").glob("*.png"))) == 2


def test_render_refuses_a_folder_with_files_and_leaves_it_as_it_was(capsys, earlier_out):
    code, out, err = run_cli(capsys, "render", "--heads", "1", "--out", str(earlier_out.folder))
    assert code == 2 and out == [] and len(err) == 1
    assert "holds other files" in err[0] and "choose an empty or new folder" in err[0]
    assert earlier_out.unchanged()


@pytest.mark.parametrize("existing", [True, False], ids=["empty", "new"])
def test_render_writes_into_an_empty_or_new_folder(qapp, capsys, tmp_path, existing):
    folder = tmp_path / "figs"
    if existing:
        folder.mkdir()
    code, out, err = run_cli(capsys, "render", "--heads", "1", "--which", "mean", "--out", str(folder))
    assert code == 0, err
    assert sorted(Path(p).name for p in out) == sorted(p.name for p in folder.iterdir()) != []


def test_headless_fallback_renders_again_beside_other_files(qapp, capsys, tmp_path):
    """``make run`` without a display renders into the same folder every time, where ``make
    screens`` also keeps its pictures: the fallback replaces only its own heatmaps."""
    from attndesk.cli.app import headless_fallback

    folder = tmp_path / "render-out"
    (folder / "screens").mkdir(parents=True)
    (folder / "screens" / "sheet.png").write_bytes(b"a picture")
    (folder / "attn_all_h2_e8_stale.png").write_bytes(b"an older sample")
    assert headless_fallback(str(folder)) == 0
    first = sorted(p.name for p in folder.iterdir())
    assert "attn_all_h2_e8_stale.png" not in first and len([n for n in first if n.startswith("attn_")]) == 2
    assert headless_fallback(str(folder)) == 0
    assert sorted(p.name for p in folder.iterdir()) == first
    assert (folder / "screens" / "sheet.png").read_bytes() == b"a picture"
    capsys.readouterr()
