"""attndesk train and attndesk render --trained, and the learning exports (GIF, MP4, curves)."""

from __future__ import annotations

import json

import imageio.v3 as iio
import numpy as np
import pytest

from attndesk.cli import main
from attndesk.train import TrainConfig, load_trained, train

FLAGS = ["--layers", "1", "--heads", "2", "--embed-dim", "16", "--batch-size", "8", "--checkpoint-every", "2"]


def _cli(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), [line for line in err.splitlines() if "error" in line or "note" in line]


def test_train_writes_model_curves_figures_and_animation(qapp, capsys, tmp_path):
    out = tmp_path / "run"
    code, lines, errors = _cli(
        capsys,
        "train",
        "--task",
        "reverse",
        "--seq-len",
        "8",
        "--steps",
        "4",
        *FLAGS,
        "--out",
        str(out),
        "--curves",
        "png,svg",
    )
    assert code == 0 and errors == []
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "attn_reverse_layer0_step4.png",
        "checkpoints.safetensors",
        "config.json",
        "curves.png",
        "curves.svg",
        "history.json",
        "learning.gif",
        "model.safetensors",
    ]
    assert sorted(lines) == sorted(str(out / n) for n in names)
    frames = iio.imread(out / "learning.gif", index=None)
    assert frames.shape[0] == 3  # checkpoints at steps 0, 2, 4
    assert not np.array_equal(frames[0], frames[-1])
    assert b"<svg" in (out / "curves.svg").read_bytes()[:400]
    run = load_trained(out)
    assert run.step == 4 and run.cfg.task == "reverse" and run.cfg.layers == 1

    code, lines, errors = _cli(capsys, "render", "--trained", str(out), "--out", str(tmp_path / "fig"))
    assert code == 0 and errors == []
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [
        "attn_all_reverse_layer0_step4.png",
        "attn_mean_reverse_layer0_step4.png",
    ]


def test_mp4_animation(qapp, tmp_path):
    from attndesk.render.training import write_animation

    run = train(
        TrainConfig(task="copy", steps=2, seq_len=8, embed_dim=16, heads=2, layers=1, checkpoint_every=1, batch_size=4)
    )
    path = write_animation(run, tmp_path / "learn.mp4", size=(480, 320))
    data = path.read_bytes()
    assert data[4:8] == b"ftyp" and len(data) > 1000
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert meta["size"] == (480, 320) and len(list(reader)) == 3  # steps 0, 1, 2
    from attndesk.render.export import ExportError

    with pytest.raises(ExportError, match=r"\.gif, \.mp4"):
        write_animation(run, tmp_path / "learn.avi")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--task", "reverse", "--seq-len", "7"], "even seq_len"),
        (["--task", "induction", "--heads", "3"], "heads do not divide"),
        (["--task", "text", "--text-file", "BINARY"], "binary"),
        (["--task", "text", "--text-file", "EMPTY"], "empty"),
        (["--preset", "reverse", "--task", "copy"], "drop --task or --preset"),
        (["--steps", "0"], "whole number >= 1"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_files(capsys, tmp_path, args, words):
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    (tmp_path / "e.txt").write_text("")
    args = [{"BINARY": str(tmp_path / "b.bin"), "EMPTY": str(tmp_path / "e.txt")}.get(a, a) for a in args]
    code, lines, errors = _cli(capsys, "train", *args, "--out", str(tmp_path / "out"))
    assert code == 2 and len(errors) == 1 and words in errors[0] and lines == []
    assert not (tmp_path / "out").exists()


def test_render_trained_refuses_another_version(capsys, tmp_path):
    run = train(TrainConfig(task="copy", steps=1, seq_len=8, embed_dim=16, heads=2, layers=1, batch_size=4))
    run.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    meta["format_version"] = 99
    (tmp_path / "m" / "config.json").write_text(json.dumps(meta))
    code, _lines, errors = _cli(capsys, "render", "--trained", str(tmp_path / "m"), "--out", str(tmp_path / "f"))
    assert code == 2 and len(errors) == 1 and "format version 99" in errors[0]
    assert not (tmp_path / "f").exists()


def test_curves_have_the_loss_drawn(qapp, tmp_path):
    from attndesk.render.training import write_curves

    run = train(
        TrainConfig(task="copy", steps=6, seq_len=8, embed_dim=16, heads=2, layers=1, batch_size=4, eval_every=2)
    )
    image = iio.imread(write_curves(run, tmp_path / "c.png", size=(600, 400)))
    blue = (image[..., 0] == 0x1F) & (image[..., 1] == 0x77) & (image[..., 2] == 0xB4)
    assert blue.sum() > 50  # the loss curve's colour


def test_render_a_preset_by_name(qapp, capsys, tmp_path):
    code, lines, errors = _cli(capsys, "render", "--trained", "previous-token", "--which", "0", "--out", str(tmp_path))
    assert code == 0 and errors == [] and lines == [str(tmp_path / "attn_head0_previous-token_layer0_step400.png")]


def test_ctrl_c_stops_between_steps_and_keeps_the_run(qapp, capsys, tmp_path, monkeypatch):
    import os
    import signal

    from attndesk.cli import train_job as cli_train_job

    report_step = cli_train_job._Progress.__call__

    def press_ctrl_c_at_step_5(self, report):  # a real SIGINT, delivered between steps 5 and 6
        report_step(self, report)
        if report.step == 5:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cli_train_job._Progress, "__call__", press_ctrl_c_at_step_5)
    # as a shell starts it: an earlier test (a library's start-up) may have left SIGINT ignored
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_run(capsys, tmp_path)
    finally:
        signal.signal(signal.SIGINT, outer)


def _ctrl_c_run(capsys, tmp_path) -> None:
    import signal

    code, lines, errors = _cli(
        capsys,
        "train",
        "--task",
        "copy",
        "--seq-len",
        "8",
        "--steps",
        "1000",
        *FLAGS,
        "--animation",
        "none",
        "--out",
        str(tmp_path / "run"),
    )
    assert code == 1 and len(errors) == 1 and "stopped at step 5 of 1,000" in errors[0]
    assert str(tmp_path / "run" / "model.safetensors") in lines
    run = load_trained(tmp_path / "run")
    assert run.status == "stopped" and run.step == 5 and run.history[-1]["step"] == 5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_divergent_run_says_so_and_writes_the_last_good_weights(qapp, capsys, tmp_path, monkeypatch):
    import types

    import torch.nn.functional as F

    from attndesk.train import trainer as trainer_module

    calls = {"n": 0}

    def cross_entropy(*args, **kwargs):  # the loss of step 4 comes out NaN
        calls["n"] += 1
        loss = F.cross_entropy(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 4 else loss

    monkeypatch.setattr(trainer_module, "F", types.SimpleNamespace(cross_entropy=cross_entropy))
    code, lines, errors = _cli(
        capsys, "train", "--task", "copy", "--seq-len", "8", "--steps", "10", *FLAGS, "--out", str(tmp_path / "run")
    )
    assert code == 1 and len(errors) == 1 and "loss became nan at step 4" in errors[0] and "last good" in errors[0]
    assert str(tmp_path / "run" / "config.json") in lines
    run = load_trained(tmp_path / "run")
    assert run.status == "diverged" and run.step == 2


@pytest.mark.parametrize(("flags", "load", "expected"), [(["--threads", "2"], 2.0, 2), ([], 2.0, 1), ([], 0.0, 2)])
def test_train_threads_forces_the_count_else_the_load_chooses(capsys, tmp_path, monkeypatch, flags, load, expected):
    import torch

    from attndesk.system import threads
    from attndesk.train import Trainer

    seen: list[int] = []
    one_step = Trainer._one_step

    def spy(self, loop):  # the real step, noting the count it runs on
        seen.append(torch.get_num_threads())
        return one_step(self, loop)

    monkeypatch.setattr(Trainer, "_one_step", spy)
    monkeypatch.setattr(threads, "WORK_PER_THREAD", 1.0)  # the tiny model's steps count as large work
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: load)
    out = str(tmp_path / "run")
    base = torch.get_num_threads()  # 1, or what make test-isa sets
    args = ["train", "--task", "reverse", "--steps", "2", *FLAGS, *flags, "--animation", "none", "--out", out]
    code, _, errors = _cli(capsys, *args)
    assert code == 0 and errors == []
    assert seen == [expected, expected]
    assert torch.get_num_threads() == base


def test_a_folder_with_files_is_refused_before_training(capsys, earlier_out):
    code, lines, errors = _cli(capsys, "train", "--task", "reverse", "--steps", "4", "--out", str(earlier_out.folder))
    assert code == 2 and lines == [] and len(errors) == 1
    assert "holds other files" in errors[0] and "choose an empty or new folder" in errors[0]
    assert earlier_out.unchanged()


@pytest.mark.parametrize("existing", [True, False], ids=["empty", "new"])
def test_an_empty_or_new_folder_is_written(qapp, capsys, tmp_path, existing):
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    code, lines, errors = _cli(
        capsys, "train", "--task", "reverse", "--seq-len", "8", "--steps", "2", *FLAGS, "--out", str(out)
    )
    assert code == 0 and errors == []
    assert sorted(line.split("/")[-1] for line in lines) == sorted(p.name for p in out.iterdir())
    assert (out / "model.safetensors").is_file()
