"""The tiny byte-level BPE Qwen2 tokenizer files every tiny Qwen checkpoint here carries.

:func:`write_tiny_tokenizer` writes ``vocab.json``, ``merges.txt`` and ``tokenizer_config.json``
(the files ``Qwen2Tokenizer`` reads) for a few words plus the model's special tokens, without the
network and without training: the byte alphabet is GPT-2's and each word gets its merges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _byte_symbols() -> list[str]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the rest are shifted
    past 255 (GPT-2's mapping, which Qwen2's tokenizer uses)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def write_tiny_tokenizer(
    folder: Path,
    words: tuple[str, ...],
    specials: tuple[str, ...],
    overrides: dict[str, Any] | None = None,
) -> dict[str, int]:
    """vocab.json, merges.txt, tokenizer_config.json; returns the special tokens' ids.

    ``words`` get BPE merges, ``specials`` become added special tokens (``<|endoftext|>`` pads,
    ``<|im_end|>`` ends); ``overrides`` replaces tokenizer_config.json's fields, ``None`` dropping
    one (Qwen2.5-Omni's media tokens, for instance)."""
    symbols = _byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    merges: list[str] = []
    for word in words:
        pieces = [symbols[b] for b in word.encode()]
        current = pieces[0]
        for piece in pieces[1:]:
            if f"{current} {piece}" not in merges:
                merges.append(f"{current} {piece}")
            current += piece
            vocab.setdefault(current, len(vocab))
    ids = {name: len(vocab) + i for i, name in enumerate(specials)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text(
        "#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8"
    )
    added = {
        str(i): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for name, i in ids.items()
    }
    fields = {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "additional_special_tokens": list(specials[1:]),
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "add_prefix_space": False,
    }
    for key, value in (overrides or {}).items():  # None: drop that field
        if value is None:
            fields.pop(key, None)
        else:
            fields[key] = value
    (folder / "tokenizer_config.json").write_text(json.dumps(fields, indent=2), encoding="utf-8")
    return ids
