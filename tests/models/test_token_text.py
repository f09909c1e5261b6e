"""What a person reads for a token: the tokenizer's own decoding, whitespace made visible, and the
same text in every result a view, page or export shows (a byte-level BPE GPT-2 with ``Ġ`` and ``Ċ``)."""

from __future__ import annotations

import json

import pytest
from pretrained_models import build, build_byte_level

from attndesk.interp.lens import logit_lens
from attndesk.models import Generator, load_pretrained, run_pretrained, token_text, token_texts
from attndesk.render.page import page_data, pretrained_page_maps

TEXT = "When Mary went.\nJohn"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_pretrained(build_byte_level("gpt2", tmp_path_factory.mktemp("bpe") / "gpt2"))


@pytest.mark.parametrize(
    ("raw", "decoded", "shown"),
    [
        ("ĠMary", " Mary", "␣Mary"),  # byte-level BPE: the decoder gives the space back
        ("Ċ", "\n", "⏎"),
        ("ĠĠ", "  ", "␣␣"),
        ("▁Mary", "Mary", "␣Mary"),  # SentencePiece's decoder strips a lone token's word-start space
        ("▁", "", "▁"),
        ("##ing", "ing", "##ing"),  # WordPiece reads as it is
        ("cat", "cat", "cat"),
        ("âĢ", "\ufffd", "âĢ"),  # a piece of a multi-byte character: no text of its own
        ("[CLS]", None, "[CLS]"),
    ],
)
def test_a_token_reads_as_text_with_a_visible_leading_space(raw, decoded, shown):
    assert token_text(raw, decoded) == shown


def test_a_byte_level_tokenizer_decodes_its_own_tokens(model):
    raw = model.tokenizer.convert_ids_to_tokens(model.tokenizer(TEXT)["input_ids"])
    assert "ĠMary" in raw and "Ċ" in raw  # the scheme under test
    shown = token_texts(model.tokenizer, [*raw, "<|endoftext|>"])
    assert shown[raw.index("ĠMary")] == "␣Mary" and shown[raw.index("Ċ")] == "⏎"
    assert shown[-1] == "<|endoftext|>"
    assert "".join(shown[:-1]).replace("␣", " ").replace("⏎", "\n") == TEXT


def test_a_wordpiece_models_tokens_are_unchanged(tmp_path):
    wordpiece = load_pretrained(build("gpt2", tmp_path / "wp"))
    run = run_pretrained(wordpiece, "unaffable cats")
    assert run.tokens == run.raw_tokens


def _raw_marks(texts) -> list[str]:
    return [t for t in texts if t is not None and ("Ġ" in t or "Ċ" in t)]


def test_every_result_names_tokens_as_read_and_keeps_the_raw_ones(model):
    run = run_pretrained(model, TEXT)
    assert run.raw_tokens is not None and "ĠMary" in run.raw_tokens
    assert "␣Mary" in run.tokens and "⏎" in run.tokens and not _raw_marks(run.tokens)
    assert run.next_token is not None and not _raw_marks(run.next_token.tokens)
    lens = logit_lens(model, TEXT, answer=" Mary")
    assert lens.answer == "␣Mary" and "␣Mary" in lens.tokens
    assert not _raw_marks(t for level in lens.top_tokens for row in level for t in row)
    generator = Generator(model, TEXT, max_new_tokens=2)
    step = generator.step()
    assert not _raw_marks([step.token, *generator.tokens])


def test_the_html_page_names_tokens_as_read(model):
    page = json.dumps(page_data(pretrained_page_maps(run_pretrained(model, TEXT), layer=0)), ensure_ascii=False)
    assert "␣Mary" in page and "⏎" in page
    assert "ĠMary" not in page and "Ċ" not in page
