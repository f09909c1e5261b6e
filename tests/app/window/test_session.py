"""Session files: absurd JSON is a SessionError in one line, out-of-range parameters are refused
(not clamped later), missing parameters take their defaults, and a failing save never damages the
file already there."""

from __future__ import annotations

import errno
import json
import os

import pytest
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)

from attndesk.core import AttentionConfig
from attndesk.session.file import SessionError, load_session, parse_session, save_session
from attndesk.session.state import AppState
from attndesk.system import free_memory


@pytest.fixture(autouse=True)
def fixed_free_memory(monkeypatch):
    monkeypatch.setattr(free_memory, "available_memory", lambda *device: 8 * 2**30)


def _session(config: dict, **fields) -> str:
    return json.dumps({"format": "attndesk-session", "version": 1, "text": "the cat", "config": config, **fields})


CASES = [
    ("[" * 100_000 + "]" * 100_000, "its JSON is nested too deeply"),
    ('{"a": ' * 50_000 + "1" + "}" * 50_000, "its JSON is nested too deeply"),
    (
        _session({"seed": 1}).replace('"seed": 1', '"seed": ' + "7" * 5000),
        "it holds a number of more than 4,300 digits",
    ),
    (
        _session({"num_heads": 10**9}),
        "the session's parameters are invalid: 1,000,000,000 heads do not divide embed_dim 64",
    ),
    (_session({"embed_dim": 10**9}), "the session's parameters are invalid: embed dim 1,000,000,000 needs"),
    (_session({"pad_to": 10**9}), "the session's parameters are invalid: pad_to 1,000,000,000 needs at least"),
    (_session({"vocab_size": 10**9}), "vocab size 1,000,000,000 needs 238.4 GiB for the embedding table"),
    (_session({"scaled": "no"}), "the session's parameters are invalid: scaled must be true or false, got 'no' (str)"),
    (_session({"dropout": 1e400}), "dropout must be in [0, 1), got inf"),
    (_session({"seed": 10**30}), "seed must be a whole number >= 0 and at most"),
    (_session({"embed_dim": 64.5}), "embed_dim must be a positive whole number, got 64.5 (float)"),
]


@pytest.mark.parametrize("text, fragment", CASES, ids=[c[1][:50] for c in CASES])
def test_bad_sessions_are_one_line_session_errors(text, fragment):
    with pytest.raises(SessionError) as info:
        parse_session(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message, message


def test_loading_a_bad_file_names_it(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SessionError, match=r"^deep\.json: not an attndesk session: its JSON is nested too deeply$"):
        load_session(path)


def test_missing_parameters_take_the_defaults():
    session = parse_session(_session({"num_heads": 8, "mask": "causal"}))
    assert session.state.config == AttentionConfig(num_heads=8, mask="causal")
    assert session.state.config.validate() == AttentionConfig(num_heads=8, mask="causal")


def _existing(tmp_path):
    path = tmp_path / "work.attndesk.json"
    save_session(AppState(text="the old text"), path)
    return path, path.read_bytes()


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_a_save_that_fails_midway_keeps_the_old_file(tmp_path, monkeypatch, fail_at):
    path, before = _existing(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device")

    def fail(*args, **kwargs):
        raise full

    if fail_at == "write":  # the disk fills up after a few bytes
        real_fdopen = os.fdopen

        class HalfFile:
            def __init__(self, fh):
                self._fh = fh

            def write(self, data):
                self._fh.write(data[:10])
                raise full

            def __getattr__(self, name):
                return getattr(self._fh, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._fh.close()

        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: HalfFile(real_fdopen(fd, *a, **k)))
    else:
        monkeypatch.setattr(os, fail_at, fail)
    new = AppState(text="a new text that must not land half-written", config=AttentionConfig(num_heads=8))
    with pytest.raises(
        SessionError, match=r"cannot save the session to .*work\.attndesk\.json: No space left on device"
    ):
        save_session(new, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]  # no temporary file left behind
    assert load_session(path).state.text == "the old text"


def test_an_interrupted_save_keeps_the_old_file(tmp_path, monkeypatch):
    path, before = _existing(tmp_path)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_session(AppState(text="new"), path)
    monkeypatch.undo()
    assert path.read_bytes() == before and os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_before_a_byte_is_read(special):
    # /dev/zero used to be read forever on the GUI thread (RSS +150 MiB/s: soak finding M1)
    with pytest.raises(SessionError, match="character device, not a regular file; choose an attndesk session"):
        load_session(special)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "session.json"
    os.mkfifo(fifo)
    with pytest.raises(SessionError, match="pipe"):
        load_session(fifo)


def test_a_pretrained_sessions_head_view_survives_the_toy_head_count():
    # the config of a pretrained session holds the toy settings (4 heads): head 9 of the model's 12 was lost
    import json

    from attndesk.session.file import parse_session, session_json
    from attndesk.session.state import PACKAGED, AppState

    saved = AppState(text="the cat", mode=PACKAGED)
    saved.view.target = 9
    saved.pretrained.layer = 3
    assert parse_session(json.dumps(session_json(saved))).state.view.target == 9
    toy = AppState(text="the cat")  # 4 heads: no head 9
    toy.view.target = 9
    assert parse_session(json.dumps(session_json(toy))).state.view.target == "all"
    old = {
        "format": "attndesk-session",
        "version": 1,
        "text": "the cat",
        "config": {},
        "view": 9,
        "mode": "Pretrained: all-MiniLM-L6-v2",
        "pretrained": {"folder": None, "layer": 3, "hide_special": False, "all_layers": False, "ablate": []},
    }
    assert parse_session(json.dumps(old)).state.view.target == 9
