"""Opening a document: UTF-8 up to 1 MiB works; binary, undecodable or too large is refused politely."""

from __future__ import annotations

import os

import pytest

from attndesk.core import AttentionConfig, ConfigError
from attndesk.files.textfile import MAX_TEXT_BYTES, read_text_file
from attndesk.runs.pipeline import plan_text


def test_a_1_mib_utf8_text_opens(tmp_path):
    line = "Le chat dort au soleil; the cat sleeps — naïve café.\n"
    body = (line * (MAX_TEXT_BYTES // len(line.encode()) + 1)).encode("utf-8")
    body = body[: MAX_TEXT_BYTES - 3]
    body = body[: len(body.decode("utf-8", "ignore").encode("utf-8"))]  # whole characters only
    path = tmp_path / "long.txt"
    path.write_bytes(b"\xef\xbb\xbf" + body)  # with a BOM: exactly at most 1 MiB
    assert os.path.getsize(path) <= MAX_TEXT_BYTES
    text = read_text_file(path)
    assert not text.startswith("\ufeff") and text.encode("utf-8") == body
    # and it plans as a long document: far over the budget, the pyramid
    plan = plan_text(AttentionConfig(embed_dim=512, num_heads=8, memory_budget=2 * 2**30), text)
    assert plan.kind == "pyramid" and plan.lq > 100_000


def test_too_large_is_refused_with_the_size(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"word " * (MAX_TEXT_BYTES // 5 + 1))
    with pytest.raises(ConfigError, match=r"big\.txt is 1\.0 MiB; attndesk opens text files up to 1\.0 MiB"):
        read_text_file(path)


def test_binary_file_is_refused_politely(tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(ConfigError, match=r"image.png looks like a binary file"):
        read_text_file(path)


def test_undecodable_bytes_name_the_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xe9 at offset 3"):
        read_text_file(path)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: p, "no such file"),
        (lambda p: (p.mkdir(), p)[1], "is a folder"),
        (lambda p: (p.write_text(" \n\t "), p)[1], "is empty"),
    ],
)
def test_missing_folder_and_empty(tmp_path, make, fragment):
    path = make(tmp_path / "doc.txt")
    with pytest.raises(ConfigError, match=fragment):
        read_text_file(path)
