"""The text a person reads for a tokenizer's raw token.

Byte-level BPE (GPT-2, RoBERTa, LLaMA 3) spells a space ``Ġ`` and a newline ``Ċ``; SentencePiece
spells a space ``▁``. The tokenizer's own decoder turns a token back into text; whitespace in that
text is then drawn with a visible mark (``␣Mary``, ``⏎``), so a leading space never disappears.
WordPiece and word-level tokens already read as text and are shown unchanged. Views keep the raw
token for tooltips.
"""

from __future__ import annotations

from collections.abc import Iterable

SPACE, NEWLINE, TAB, RETURN = "␣", "⏎", "⇥", "␍"
_VISIBLE = str.maketrans({" ": SPACE, "\n": NEWLINE, "\t": TAB, "\r": RETURN})
_METASPACE = "▁"  # SentencePiece's word start: its decoder strips it from a text's first token


def token_text(raw: str, decoded: str | None = None) -> str:
    """What a person reads for token ``raw``, given ``decoded``, the tokenizer's text for it alone
    (``convert_tokens_to_string([raw])``). None, or a text that is the raw token itself (or the raw
    token without WordPiece's ``##``), or a piece of a multi-byte character: the raw token, with
    its whitespace made visible."""
    if decoded is None or decoded in (raw, raw.removeprefix("##")) or "\ufffd" in decoded or not decoded:
        return raw.translate(_VISIBLE)
    if raw.startswith(_METASPACE) and not decoded[:1].isspace():
        decoded = " " + decoded
    return decoded.translate(_VISIBLE)


def token_texts(tokenizer, raw_tokens: Iterable[str]) -> list[str]:
    """``token_text`` of each raw token, decoded by ``tokenizer`` (a transformers tokenizer);
    special tokens (``<|endoftext|>``, ``[CLS]``) stay as they are."""
    special = set(getattr(tokenizer, "all_special_tokens", ()))
    convert = getattr(tokenizer, "convert_tokens_to_string", None)
    out = []
    for token in map(str, raw_tokens):
        decoded = None if token in special or convert is None else str(convert([token]))
        out.append(token_text(token, decoded))
    return out


def id_texts(tokenizer, ids: Iterable[int]) -> list[str]:
    """What a person reads for each token id (``token_texts`` of the tokenizer's raw tokens)."""
    return token_texts(tokenizer, tokenizer.convert_ids_to_tokens([int(i) for i in ids]))
