"""Read a document to attend over: UTF-8 text up to 1 MiB, or a ConfigError that says why not."""

from __future__ import annotations

import os
import stat

from attndesk.errors import ConfigError
from attndesk.system.free_memory import format_bytes

MAX_TEXT_BYTES = 2**20  # 1 MiB: a long document, but still something a person reads
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular(name: str, limit: int, *, wanted: str = "a text file") -> bytes:
    """At most ``limit`` bytes of a regular file. Opened without blocking and checked on the open
    descriptor, so a FIFO (which would wait for a writer) or /dev/zero (endless) is refused
    before a byte is read, and a file swapped for one meanwhile is caught too."""
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
            raise ConfigError(f"{name} is {kind}, not a regular file; choose {wanted}")
        return handle.read(limit)


def read_text_file(path: str | os.PathLike, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The text of a UTF-8 file (a leading BOM dropped, line ends kept as written).

    Raises ``ConfigError`` with a one-line reason for a missing or unreadable path, a folder, a
    device, pipe or socket (/dev/zero, a FIFO), a file over ``max_bytes``, a binary file (NUL
    bytes), undecodable bytes, or no text at all.
    Reads at most ``max_bytes + 1`` bytes, so a huge file is refused without loading it.
    """
    name = os.fspath(path)
    shown = os.path.basename(name) or name
    if not os.path.exists(name):
        raise ConfigError(f"{shown}: no such file")
    if os.path.isdir(name):
        raise ConfigError(f"{shown} is a folder; choose a text file")
    try:
        data = read_regular(name, max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{shown} cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        size = os.path.getsize(name)
        raise ConfigError(
            f"{shown} is {format_bytes(size)}; attndesk opens text files up to {format_bytes(max_bytes)} "
            "(split the document or open a part of it)"
        )
    if b"\x00" in data:
        raise ConfigError(f"{shown} looks like a binary file, not text; open a UTF-8 text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start:,} cannot be "
            "decoded); save it as UTF-8 and open it again"
        ) from None
    if not text.strip():
        raise ConfigError(f"{shown} is empty: there is no text to attend over")
    return text
