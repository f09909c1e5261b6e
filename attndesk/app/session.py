"""Sessions: the text, every parameter and the view settings as a small JSON file.

Loading validates everything before anything is applied, so a corrupt or incompatible file is
rejected with one clear message and the window stays as it was: malformed, too deeply nested or
absurd JSON, wrong types, and parameters out of range or too large for memory (the core's own
validation). Parameters the file leaves out take their defaults. Saving is atomic.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attndesk.core.atomic import atomic_write
from attndesk.core.config import AttentionConfig
from attndesk.core.devices import device_availability
from attndesk.core.errors import ConfigError

FORMAT = "attndesk-session"
VERSION = 1
COLORMAP_NAMES = ("viridis", "magma", "CET-L1")
MAX_BYTES = 8 * 2**20  # a session holds one text; anything bigger is not a session


class SessionError(ValueError):
    """The file cannot be used as a session; the message says why."""


@dataclass
class Session:
    text: str
    config: dict[str, Any]
    key_text: str = ""
    cross: bool = False
    mode: str = "Toy model"
    colormap: str = "viridis"
    shared_scale: bool = True
    view: str | int = "all"  # "all", "mean" or a head index
    # pretrained mode: {"folder": str | None, "layer": int, "hide_special": bool, "all_layers": bool,
    # "ablate": [[layer, head], ...]}; None (and absent from the file) for toy sessions
    pretrained: dict[str, Any] | None = None
    notices: list[str] = field(default_factory=list, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("notices")
        if data["pretrained"] is None:
            data.pop("pretrained")  # toy sessions stay byte-for-byte what older attndesk wrote
        return {"format": FORMAT, "version": VERSION, **data}

    @classmethod
    def from_json(cls, data: Any) -> "Session":
        """Validate a parsed JSON document; raises SessionError naming the first problem."""
        if not isinstance(data, dict):
            raise SessionError("not an attndesk session: the file does not hold a JSON object")
        if data.get("format") != FORMAT:
            raise SessionError("not an attndesk session: the 'format' field is missing or wrong")
        version = data.get("version")
        if version != VERSION:
            raise SessionError(f"session version {version!r} is not supported (this attndesk reads version {VERSION})")
        known = {"format", "version", "text", "config", "key_text", "cross", "mode", "colormap",
                 "shared_scale", "view", "pretrained"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SessionError(f"unknown session field(s): {', '.join(unknown)}")
        expect = {"text": str, "config": dict, "key_text": str, "cross": bool, "mode": str, "colormap": str,
                  "shared_scale": bool}
        for name, kind in expect.items():
            if name in ("text", "config"):
                if name not in data:
                    raise SessionError(f"the session has no '{name}'")
            elif name not in data:
                continue
            if not isinstance(data[name], kind):
                raise SessionError(f"session field '{name}' should be a {kind.__name__}, got {type(data[name]).__name__}")
        view = data.get("view", "all")
        if not (view in ("all", "mean") or (isinstance(view, int) and not isinstance(view, bool) and view >= 0)):
            raise SessionError(f"session field 'view' should be 'all', 'mean' or a head index, got {view!r}")
        if data.get("colormap", "viridis") not in COLORMAP_NAMES:
            raise SessionError(f"unknown colormap {data['colormap']!r}; known: {', '.join(COLORMAP_NAMES)}")
        notices: list[str] = []
        # a field the file leaves out takes its default, not whatever the window showed before
        config = {**AttentionConfig().to_dict(), **data["config"]}
        device = config.get("device")
        if isinstance(device, str) and device_availability().get(device, None) is not None:
            notices.append(f"the session used device {device!r}, which is not available here; using cpu")
            config["device"] = "cpu"
        try:
            AttentionConfig.from_dict(config).validate()
        except (ConfigError, TypeError) as exc:
            raise SessionError(f"the session's parameters are invalid: {exc}") from None
        pretrained = _check_pretrained(data.get("pretrained"))
        # a pretrained session's config holds the toy settings, not the model's head count (the panel
        # falls back to all heads itself if the model has fewer)
        if pretrained is None and isinstance(view, int) and view >= config.get("num_heads", 0):
            view = "all"
        kwargs = {k: data[k] for k in expect if k in data}
        kwargs["config"] = config
        return cls(view=view, notices=notices, pretrained=pretrained, **kwargs)


def _check_pretrained(value: Any) -> dict[str, Any] | None:
    """The session's pretrained-mode state, checked field by field (the layer and heads are
    checked against the model only once it is known)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SessionError("session field 'pretrained' should be an object")
    unknown = sorted(set(value) - {"folder", "layer", "hide_special", "all_layers", "ablate"})
    if unknown:
        raise SessionError(f"unknown field(s) in 'pretrained': {', '.join(unknown)}")
    folder = value.get("folder")
    if folder is not None and not isinstance(folder, str):
        raise SessionError("'pretrained.folder' should be a folder path or null")
    layer = value.get("layer", 0)
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise SessionError(f"'pretrained.layer' should be a layer number >= 0, got {layer!r}")
    flags = {}
    for name in ("hide_special", "all_layers"):
        flags[name] = value.get(name, False)
        if not isinstance(flags[name], bool):
            raise SessionError(f"'pretrained.{name}' should be true or false")
    ablate = value.get("ablate", [])
    pairs = []
    if not isinstance(ablate, list):
        raise SessionError("'pretrained.ablate' should be a list of [layer, head] pairs")
    for item in ablate:
        if (not isinstance(item, list) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in item)):
            raise SessionError(f"'pretrained.ablate' holds {item!r}, not a [layer, head] pair")
        pairs.append([int(item[0]), int(item[1])])
    return {"folder": folder, "layer": layer, "ablate": pairs, **flags}


def save_session(session: Session, path: str | os.PathLike) -> Path:
    """Write the session as JSON, atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    try:
        AttentionConfig.from_dict(session.config).validate()
    except (ConfigError, TypeError) as exc:
        raise SessionError(f"fix the parameters before saving: {exc}") from None
    text = json.dumps(session.to_json(), indent=2, ensure_ascii=False)
    try:
        atomic_write(path, (text + "\n").encode("utf-8"))
    except OSError as exc:
        raise SessionError(f"cannot save the session to {path}: {exc.strerror or exc}") from None
    return path


def parse_session(text: str) -> Session:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SessionError(f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    except RecursionError:
        raise SessionError("not an attndesk session: its JSON is nested too deeply") from None
    except ValueError:  # Python refuses to read an integer of more than sys.get_int_max_str_digits() digits
        limit = sys.get_int_max_str_digits()
        raise SessionError(f"not an attndesk session: it holds a number of more than {limit:,} digits") from None
    return Session.from_json(data)


def load_session(path: str | os.PathLike) -> Session:
    """Read and validate a session file; raises SessionError (never applies anything itself)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SessionError(f"{path.name} is {size:,} bytes: too large to be an attndesk session")
        raw = path.read_bytes()
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
