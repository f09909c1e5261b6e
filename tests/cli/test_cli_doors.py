"""``attndesk render`` at its doors: each bad input is one line on stderr, a non-zero exit and no
output folder; a long run prints its plan and progress; the output set is all-or-nothing, also
when a write fails midway or Ctrl+C arrives."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attndesk.cli import main
from attndesk.cli.progress import ProgressLine
from attndesk.core import AttentionConfig
from attndesk.runs.pipeline import plan_text
from attndesk.system import free_memory

ROOT = Path(__file__).resolve().parents[2]
FREE = 8 * 2**30


@pytest.fixture(autouse=True)
def fixed_free_memory(monkeypatch):
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: FREE)


def run_cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


LONG_TEXT = " ".join(f"w{i % 50}" for i in range(3000))

CASES = [
    (["--embed-dim", "1000000000"], "embed dim 1,000,000,000 needs 13.9 EiB for the Q/K/V/output projections"),
    (["--vocab-size", "1000000000"], "vocab size 1,000,000,000 needs 238.4 GiB for the embedding table; at most"),
    (["--pad-to", "100000000"], "pad_to 100,000,000 needs at least 125.2 GiB"),
    (["--heads", "1", "--hidden-dim", "1000000000"], "hidden dim 1,000,000,000 needs 726.4 GiB"),
    (["--text-file", "/dev/zero"], "/dev/zero is a character device, not a regular file; choose a text file"),
    (["--text-file", _fifo], "pipe is a pipe (FIFO), not a regular file"),
    (["--text-file", "/dev/null"], "/dev/null is a character device"),
    (["--vmax", "nan"], "argument --vmax: expected a finite number, got 'nan'"),
    (["--vmax", "inf"], "argument --vmax: expected a finite number, got 'inf'"),
    (["--vmin", "inf"], "argument --vmin: expected a finite number, got 'inf'"),
    (["--vmin", "-nan"], "argument --vmin: expected a finite number"),
    (["--vmin", "-inf", "--vmax", "0.5"], "argument --vmin: expected a finite number, got '-inf'"),
    (["--vmax", "-1"], "--vmax -1 is at or below the bottom of the colour scale (0, the smallest weight)"),
    (["--vmax", "0"], "--vmax 0 is at or below the bottom of the colour scale"),
    (["--vmin", "0.5", "--vmax", "0.5"], "--vmin 0.5 must be below --vmax 0.5"),
    (["--vmin", "0.99"], "--vmin 0.99 is at or above the largest weight of --which all"),
    (["--region", "-1:2,0:2"], "argument --region: token positions count from 0 (not from the end)"),
    (["--region=-1:2,0:2"], "argument --region: token positions count from 0"),
    (["--region", "2:1,0:2"], "each range must satisfy 0 <= start < end"),
    (["--region", "0:2,0:99"], "region 0:2,0:99 is outside the 3x3 weights"),
    (["--memory-budget", "inf"], "argument --memory-budget: expected a size in bytes"),
    (["--dpi", "nan"], "argument --dpi: expected a finite number"),
    (["--dropout", "nan"], "argument --dropout: expected a finite number, got 'nan'"),
    (["--dropout", "1"], "dropout must be in [0, 1), got 1.0"),
    (["--seed", "1" + "0" * 30], "seed must be a whole number >= 0 and at most"),
    (["--which", "9"], "head 9 does not exist: this run has heads 0..3"),
    (
        ["--text", LONG_TEXT, "--memory-budget", "1M", "--region", "0:3000,0:3000"],
        "--region 0:3000,0:3000 holds 9,000,000 cells x 4 head(s): 274.7 MiB of exact weights, over the 1.0 MiB memory budget",
    ),
]


def render_bad_input(capsys, tmp_path, args) -> tuple[int, list[str], list[str], Path]:
    args = [a(tmp_path) if callable(a) else a for a in args]
    text = [] if any(a.startswith("--text") for a in args) else ["--text", "a b c"]
    out_dir = tmp_path / "out"
    return (*run_cli(capsys, "render", *text, "--out", str(out_dir), *args), out_dir)


@pytest.mark.parametrize("args, fragment", CASES, ids=[c[1][:50] for c in CASES])
def test_bad_input_is_one_line_and_no_folder(capsys, tmp_path, args, fragment):
    code, out, err, out_dir = render_bad_input(capsys, tmp_path, args)
    assert code == 2 and out == []
    assert len(err) == 1 and err[0].startswith("attndesk: error: ") and fragment in err[0], err
    assert not out_dir.exists()


@pytest.mark.perf
@pytest.mark.parametrize("args, fragment", CASES, ids=[c[1][:50] for c in CASES])
def test_bad_input_is_refused_before_any_long_work(capsys, tmp_path, args, fragment):
    start = time.perf_counter()
    code, _out, _err, _out_dir = render_bad_input(capsys, tmp_path, args)
    assert code == 2 and time.perf_counter() - start < 20  # --pad-to took 26 s before


def test_a_png_larger_than_free_memory_says_what_fits(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 100 * 2**20)
    code, _out, err = run_cli(capsys, "render", "--text", "a b c", "--size", "16384x4096", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err) == 1
    assert (
        "a 16384x4096 PNG needs 512.0 MiB to paint and encode, more than the 100.0 MiB of free memory; "
        "at most about 7240x1810 fits (or export SVG/PDF)" in err[0]
    )
    # an SVG of that size is vector: no pixels to hold
    code, _out, err = run_cli(
        capsys,
        "render",
        "--text",
        "a b c",
        "--size",
        "16384x4096",
        "--format",
        "svg",
        "--which",
        "mean",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, err


def test_a_long_run_prints_its_plan_then_progress(qapp, capsys, tmp_path):
    args = [
        "render",
        "--text",
        LONG_TEXT,
        "--memory-budget",
        "16M",
        "--which",
        "mean",
        "--size",
        "400x300",
        "--out",
        str(tmp_path / "o"),
    ]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    plan = plan_text(AttentionConfig(memory_budget=16 * 2**20), LONG_TEXT)
    assert plan.blocked
    assert err[0] == f"attndesk: plan: {plan.describe()}"  # the line the window shows
    assert err[0].startswith(
        "attndesk: plan: 4 heads x 3,000 tokens: full weights 137.3 MiB exceed the 16.0 MiB budget"
    )
    progress = [line for line in err[1:] if "% " in line]
    assert progress and progress[-1].startswith("attndesk: 100% ") and "elapsed" in progress[-1]
    assert len(progress) <= 3  # one line every 5 s at most into a pipe, plus the last
    assert not any(plan.describe(eta=False) in line for line in err[1:])  # not said twice
    assert [Path(p).name for p in out] == ["attn_mean_h4_e64_padding_scaled_seed0.png"]


def test_a_short_run_prints_no_plan(qapp, capsys, tmp_path):
    code, _out, err = run_cli(
        capsys, "render", "--text", "a b c", "--which", "mean", "--size", "200x200", "--out", str(tmp_path)
    )
    assert code == 0 and err == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_line(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stream = _Terminal()
    with ProgressLine(stream) as progress:
        for step in range(1, 41):
            clock[0] += 0.125
            progress.update(step / 40, f"block {step}/40, head 1/1")
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, ended when the run ends
    frames = text.rstrip("\n").split("\r")[1:]
    assert 19 <= len(frames) <= 21  # every 0.25 s, not every block
    assert frames[-1].startswith("attndesk: 100% block 40/40, head 1/1, 0:05 elapsed")
    assert "about 0:0" in frames[len(frames) // 2]  # the time left


def test_progress_into_a_file_is_a_few_lines(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    with ProgressLine(stream) as progress:
        for step in range(1, 601):
            clock[0] += 0.5  # a five-minute run
            progress.update(step / 600, "block")
    lines = stream.getvalue().splitlines()
    assert 55 <= len(lines) <= 62 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("attndesk: 100% block, 5:00 elapsed")


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    # PYTHONPATH: the child runs from tmp_path, and must import this checkout's attndesk, not the one
    # the virtual environment was installed from
    env.update(QT_QPA_PLATFORM="offscreen", HOME=str(tmp_path), PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return env


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default. A child inherits an *ignored* SIGINT
    (``make test &`` from a script, some CI runners and agents start the suite that way), and
    Python then never turns SIGINT into KeyboardInterrupt: the Ctrl+C this test sends was lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="sends SIGINT")
def test_ctrl_c_during_a_long_run_stops_it_and_leaves_the_folder_as_it_was(tmp_path):
    out_dir = tmp_path / "figs"
    out_dir.mkdir()
    text = tmp_path / "doc.txt"
    text.write_text(" ".join(f"w{i % 50}" for i in range(40_000)))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attndesk",
            "render",
            "--text-file",
            str(text),
            "--which",
            "mean",
            "--memory-budget",
            "64M",
            "--out",
            str(out_dir),
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,  # noqa: PLW1509 - no threads yet; the child must not inherit an ignored SIGINT
    )
    try:
        first = proc.stderr.readline()  # the plan line, printed before the run starts
        assert first.startswith("attndesk: plan: 4 heads x 40,000 tokens"), first
        progress = proc.stderr.readline()  # the run's first progress line: it is under way (no sleep, no race)
        assert re.match(r"attndesk: +\d+% ", progress) and "100%" not in progress, progress
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        err = first + progress + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "attndesk: interrupted" and "Traceback" not in err
    assert out == ""
    assert list(out_dir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt", "figs"]  # no staging folder anywhere


def test_render_out_that_is_a_file_says_so(tmp_path, capsys):
    from attndesk.cli import main

    target = tmp_path / "notes.txt"
    target.write_text("keep me", encoding="utf-8")
    assert main(["render", "--text", "the cat sat", "--out", str(target)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file, not a folder" in err[0] and "Traceback" not in err[0]
    assert target.read_text(encoding="utf-8") == "keep me"
