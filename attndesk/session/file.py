"""Sessions: the window's ``AppState`` as a small JSON file.

A session is the state's dump under a format/version header. Loading is parsing, validation
(pydantic's, then ``AttentionConfig.validate()``) and nothing else: the caller assigns the
result to the window's state, so a corrupt or impossible file is refused with one line naming
the field and the window stays as it was. Keys a file does not have take the defaults.

Version 1 files (attndesk before the state model: the mode as its display string, the view
settings at top level, ``positional: bool`` in the config) are read by translating them to
version 2 first. Saving is atomic (the renderer's ``atomic_write``).

The ``config`` object's keys are the field spec's names (``runs.config.FIELDS``: the config's
dump), and ``window_problem`` refuses a value beyond what the field's control can show.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from attndesk.errors import ConfigError
from attndesk.files.atomic import atomic_write
from attndesk.files.textfile import read_regular
from attndesk.system.devices import device_availability

from .state import ALL, PACKAGED, TOY, AppState, ModeId, window_problem

FORMAT = "attndesk-session"
VERSION = 2
MAX_BYTES = 8 * 2**20  # a session holds one text; anything bigger is not a session
ALL_LAYERS_TAB = "all-layers"
# version 1 named the mode by its display string
_V1_TOY, _V1_PACKAGED, _V1_FOLDER = "Toy model", "Pretrained: all-MiniLM-L6-v2", "Pretrained folder: "


_TOO_DEEP = "not an attndesk session: its JSON is nested too deeply"


class SessionError(ValueError):
    """The file cannot be used as a session; the message says why."""


@dataclass
class Session:
    """A loaded session: the state to assign, and what the loader changed on the way (e.g. an
    unavailable device replaced by cpu), to tell the user."""

    state: AppState
    notices: list[str] = field(default_factory=list)


def session_json(state: AppState) -> dict[str, Any]:
    """The file's content: the header, then the state's dump."""
    return {"format": FORMAT, "version": VERSION, **state.model_dump(mode="json")}


def save_session(state: AppState, path: str | os.PathLike) -> Path:
    """Write ``state`` as a session, atomically; SessionError says why not (nothing is written
    for parameters that could not be loaded again)."""
    try:
        state.config.validate()
    except (ConfigError, TypeError) as exc:
        raise SessionError(f"fix the parameters before saving: {exc}") from None
    text = json.dumps(session_json(state), indent=2, ensure_ascii=False) + "\n"
    try:
        return atomic_write(path, text.encode("utf-8"))
    except OSError as exc:
        raise SessionError(f"cannot save the session to {path}: {exc.strerror or exc}") from None


def load_session(path: str | os.PathLike) -> Session:
    """Read and validate a session file; raises SessionError (never applies anything itself)."""
    path = Path(path)
    try:
        # at most MAX_BYTES + 1 bytes of a regular file: /dev/zero or a FIFO would never end
        raw = read_regular(os.fspath(path), MAX_BYTES + 1, wanted="an attndesk session (.json)")
        if len(raw) > MAX_BYTES:
            raise SessionError(f"{path.name} is over {MAX_BYTES:,} bytes: too large to be an attndesk session")
    except ConfigError as exc:
        raise SessionError(str(exc)) from None
    except OSError as exc:
        raise SessionError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SessionError(f"{path.name} is not a text (UTF-8 JSON) file") from None
    try:
        return parse_session(text)
    except SessionError as exc:
        raise SessionError(f"{path.name}: {exc}") from None


def parse_session(text: str) -> Session:
    """A session from JSON text; SessionError names the first problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SessionError(f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    except RecursionError:
        raise SessionError(_TOO_DEEP) from None
    except ValueError:  # Python refuses to read an integer of more than sys.get_int_max_str_digits() digits
        limit = sys.get_int_max_str_digits()
        raise SessionError(f"not an attndesk session: it holds a number of more than {limit:,} digits") from None
    return session_from_json(data)


def session_from_json(data: Any) -> Session:
    """Validate a parsed JSON document (either version); raises SessionError."""
    if not isinstance(data, dict):
        raise SessionError("not an attndesk session: the file does not hold a JSON object")
    if data.get("format") != FORMAT:
        raise SessionError("not an attndesk session: the 'format' field is missing or wrong")
    version = data.get("version")
    if version == 1:
        data = _from_version_1(data)
    elif version != VERSION:
        raise SessionError(
            f"session version {version!r} is not supported (this attndesk reads versions 1 and {VERSION})"
        )
    body = {k: v for k, v in data.items() if k not in ("format", "version")}
    notices = _fall_back_to_cpu(body)
    try:
        state = AppState.model_validate(body)
    except ValidationError as exc:
        raise SessionError(describe_error(exc)) from None
    except RecursionError:
        raise SessionError(_TOO_DEEP) from None
    try:
        state.config.validate()
    except (ConfigError, TypeError) as exc:
        raise SessionError(f"the session's parameters are invalid: {exc}") from None
    beyond = window_problem(state.config)
    if beyond is not None:
        raise SessionError(f"the session's parameters are invalid: {beyond}")
    _drop_missing_head(state)
    return Session(state, notices)


def describe_error(exc: ValidationError) -> str:
    """pydantic's first error in one line: "session field 'view.target': Input should be ..."."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"] if not str(part).startswith(("literal[", "int", "str")))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"unknown session field '{where}'"
    return f"session field '{where}': {message}" if where else message


def _fall_back_to_cpu(body: dict[str, Any]) -> list[str]:
    """A device this machine lacks becomes cpu, with a notice (the session still loads)."""
    config = body.get("config")
    device = config.get("device") if isinstance(config, dict) else None
    if isinstance(config, dict) and isinstance(device, str) and device_availability().get(device) is not None:
        body["config"] = {**config, "device": "cpu"}
        return [f"the session used device {device!r}, which is not available here; using cpu"]
    return []


def _drop_missing_head(state: AppState) -> None:
    """A toy session's head beyond its head count shows all heads (a pretrained session's head is
    the model's, checked once the model is known)."""
    target = state.view.target
    if state.mode.kind == "toy" and isinstance(target, int) and target >= state.config.num_heads:
        state.view.target = ALL


def _v1_mode(mode: Any, folder: Any) -> dict[str, Any] | Any:
    if mode == _V1_TOY:
        return TOY.model_dump()
    if mode == _V1_PACKAGED:
        return PACKAGED.model_dump()
    if isinstance(mode, str) and mode.startswith(_V1_FOLDER):
        return ModeId(kind="pretrained", path=folder or mode[len(_V1_FOLDER) :]).model_dump()
    if isinstance(mode, str):
        raise SessionError(f"mode {mode!r} is not available in this attndesk")
    return mode  # the wrong type: validation names it


_V1_FIELDS = {
    "format",
    "version",
    "text",
    "config",
    "key_text",
    "cross",
    "mode",
    "colormap",
    "shared_scale",
    "view",
    "pretrained",
}


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 document as version 2 (the same content, typed and grouped)."""
    unknown = sorted(set(data) - _V1_FIELDS)
    if unknown:
        raise SessionError(f"unknown session field(s): {', '.join(unknown)}")
    old = data.get("pretrained")
    pretrained = dict(old) if isinstance(old, dict) else old
    folder = pretrained.pop("folder", None) if isinstance(pretrained, dict) else None
    all_layers = pretrained.pop("all_layers", False) if isinstance(pretrained, dict) else False
    out: dict[str, Any] = {k: data[k] for k in ("text", "key_text", "cross", "config") if k in data}
    if "mode" in data:
        out["mode"] = _v1_mode(data["mode"], folder)
    view: dict[str, Any] = {k: data[k] for k in ("colormap", "shared_scale") if k in data}
    if "view" in data:
        view["target"] = data["view"]
    if all_layers is True:
        view["tab"] = ALL_LAYERS_TAB
    out["view"] = view
    if pretrained is not None:
        out["pretrained"] = pretrained
    return out


__all__ = [
    "FORMAT",
    "VERSION",
    "Session",
    "SessionError",
    "describe_error",
    "load_session",
    "parse_session",
    "save_session",
    "session_from_json",
    "session_json",
]
