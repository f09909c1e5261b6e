"""Writing files so that a failure never damages what was there: one file atomically, or a whole
set of files all-or-nothing.

``atomic_write`` writes a temporary file beside the target, flushes it to disk and renames it
over the target, so the target is either the old file or the whole new one. ``StagedFolder``
does the same for a set: every file is written into a hidden staging folder beside the target
first, and only once all of them exist are they moved into place (old files are kept aside until
the last move succeeds, and put back if one fails). Any failure, Ctrl+C included, before or
during the moves leaves the target folder as it was. Errors are OSError (callers word them).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

STAGING_PREFIX = ".attndesk-staging-"


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _remove(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None]) -> Path:
    """Write ``data`` (bytes, or a function writing them to the open file, so a large array
    streams without a second copy) to ``path`` via a temporary file in the same folder, fsync and
    os.replace. The file keeps the permissions of the one it replaces (or the usual 0666 & ~umask)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        mode = (path.stat().st_mode & 0o777) if path.exists() else (0o666 & ~current_umask())
        os.chmod(tmp, mode)  # mkstemp makes it private (0600)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    return path


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl+C (SIGINT) during a few renames that must all happen; raise it afterwards.
    Only the main thread can handle signals: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def occupied(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot take a new run's files, or None for a new or empty folder (hidden
    entries aside): a file, or a folder holding files, which a new run would partly overwrite and
    leave the rest beside it. One wording for the command line and the window: "{folder} holds
    other files (a.png, ...)"."""
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    held = sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) if path.is_dir() else []
    return f"{path} holds other files ({held[0]}, ...)" if held else None


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


class StagedFolder:
    """An all-or-nothing set of files for ``target`` (a folder, created if missing).

    >>> with StagedFolder(Path("figs")) as stage:     # doctest: +SKIP
    ...     write(stage.path("a.png")); write(stage.path("a.csv"))
    ... # here both files are in figs/, or (after an exception) neither, and figs/ is unchanged

    Files are written to ``stage.path(name)``; leaving the block without an exception commits
    them (``committed`` lists the final paths), an exception discards them.
    """

    def __init__(self, target: str | os.PathLike):
        self.target = Path(target)
        self.committed: list[Path] = []
        self._stage: Path | None = None

    def __enter__(self) -> StagedFolder:
        if self.target.exists() and not self.target.is_dir():
            raise NotADirectoryError(20, "it is a file, not a folder", str(self.target))
        # inside the target when it exists (the moves stay on one file system), else beside it
        anchor = self.target if self.target.is_dir() else _nearest_existing(self.target.parent)
        self._stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=anchor))
        return self

    def path(self, name: str) -> Path:
        if self._stage is None or Path(name).name != name:
            raise ValueError(f"{name!r}: a plain file name inside an open staged folder")
        return self._stage / name

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if kind is None:
                self.commit()
        finally:
            self.discard()

    def names(self) -> list[str]:
        return sorted(p.name for p in self._stage.iterdir()) if self._stage is not None else []

    def discard(self) -> None:
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
            self._stage = None

    def commit(self) -> list[Path]:
        """Move every staged file into the target; on any failure put everything back."""
        names = self.names()
        with deferred_interrupt():
            if not self.target.exists():
                self._commit_new()
            else:
                self._commit_into_existing(names)
        self.committed = [self.target / name for name in names]
        return self.committed

    def _staged(self) -> Path:
        """The staging folder; only called while one exists (between open and commit or discard)."""
        assert self._stage is not None, "no staging folder"
        return self._stage

    def _commit_new(self) -> None:
        """The target does not exist: create its parents and rename the whole stage into place."""
        created = []
        for folder in reversed(self.target.parents):
            if not folder.exists():
                folder.mkdir()
                created.append(folder)
        stage = self._staged()
        try:
            os.chmod(stage, 0o777 & ~current_umask())  # mkdtemp makes it private
            os.rename(stage, self.target)
        except BaseException:
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    pass
            raise
        self._stage = None

    def _commit_into_existing(self, names: list[str]) -> None:
        for name in names:
            if (self.target / name).is_dir():
                raise IsADirectoryError(21, "a folder of that name exists", str(self.target / name))
        stage = self._staged()
        aside = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX + "old-", dir=self.target))
        moved: list[tuple[str, bool]] = []  # (name, an old file was set aside)
        restored = True
        try:
            for name in names:
                dest, new = self.target / name, stage / name
                had_old = os.path.lexists(dest)
                if had_old:
                    os.chmod(new, dest.stat().st_mode & 0o777)  # keep the replaced file's permissions
                    os.replace(dest, aside / name)
                moved.append((name, had_old))
                os.replace(new, dest)
        except BaseException:
            restored = self._roll_back(moved, aside)
            raise
        finally:
            if restored:  # else the old files stay in the hidden folder rather than be lost
                shutil.rmtree(aside, ignore_errors=True)

    def _roll_back(self, moved: list[tuple[str, bool]], aside: Path) -> bool:
        """Undo the moves made so far; False if an old file could not be put back."""
        complete, stage = True, self._staged()
        for name, had_old in reversed(moved):
            dest = self.target / name
            if not (stage / name).exists():  # the new file got in: take it out again
                _remove(dest)
            if had_old:
                try:
                    os.replace(aside / name, dest)
                except OSError:
                    complete = False
        return complete
