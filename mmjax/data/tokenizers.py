"""Tokenizers with one interface: ids, attention mask and the valid-token mask (docs/design.md#tokenizers,
docs/design.md#flowclip-inputs).

`encode(texts) -> TokenBatch(ids [N,T] int32, attention_mask [N,T] bool, valid_mask [N,T] bool)`.
The valid-token mask marks non-special, non-padding positions (Flow-CLIP's V_T):
- word / BERT WordPiece: every position that is neither a special token nor padding;
- CLIP BPE: positions 1 … eot−1, eot = the FIRST position whose id is the EOT id. HF's CLIP tokenizer pads with
  `<|endoftext|>` (same id as EOT), so validity is never derived from "id ≠ pad".

Captions containing a NUL character ("\x00") are refused with a ValueError naming the caption's index
(`check_texts`): tokenizers and C string APIs treat NUL inconsistently (dropped, [UNK], or end of string), so such a
caption would be scored as some other text without any error.

Hugging Face tokenizers are loaded only with `XTokenizerFast.from_pretrained(local_dir)`: under transformers 5.x the
keyword constructors (`vocab_file=…`) silently map every token to [UNK]/wrong ids.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol, Sequence

import numpy as np

WORD_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def check_texts(texts: Sequence[str], what: str = "caption") -> None:
    """Raise ValueError naming the index of the first text that contains a NUL character ("\\x00")."""
    for i, text in enumerate(texts):
        if isinstance(text, str) and "\x00" in text:
            raise ValueError(f"{what} {i} contains a NUL character ('\\x00' at position {text.index(chr(0))}): "
                             f"{text!r}; refused (it would be tokenised as some other text)")


@dataclasses.dataclass(frozen=True)
class TokenBatch:
    ids: np.ndarray  # [N, T] int32
    attention_mask: np.ndarray  # [N, T] bool: real tokens incl. specials
    valid_mask: np.ndarray  # [N, T] bool: non-special, non-padding


class Tokenizer(Protocol):
    max_len: int
    pad_id: int
    mask_id: int | None
    vocab_size: int
    special_ids: frozenset[int]

    def encode(self, texts: Sequence[str]) -> TokenBatch: ...


class WordTokenizer:
    """Whole-word tokenizer: lowercase, whitespace split; [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then `words`
    sorted. Encoding: [CLS] words [SEP] [PAD]… to `max_len`; texts longer than max_len − 2 words raise."""

    def __init__(self, words: Sequence[str], max_len: int = 20):
        if max_len < 3:
            raise ValueError(f"max_len must be >= 3, got {max_len}")
        self.vocab = list(WORD_SPECIALS) + sorted(set(words))
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.max_len = max_len
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = 0, 1, 2, 3, 4
        self.vocab_size = len(self.vocab)
        self.special_ids = frozenset(range(len(WORD_SPECIALS)))

    def encode(self, texts: Sequence[str]) -> TokenBatch:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, got a single str")
        check_texts(texts)
        n, t = len(texts), self.max_len
        ids = np.zeros((n, t), np.int32)
        for i, text in enumerate(texts):
            words = text.lower().split()
            if len(words) > t - 2:
                raise ValueError(f"text {i} has {len(words)} words > max_len − 2 = {t - 2}: {text!r}")
            ids[i, 0] = self.cls_id
            ids[i, 1:len(words) + 1] = [self.index.get(w, self.unk_id) for w in words]
            ids[i, len(words) + 1] = self.sep_id
        attention = ids != self.pad_id
        valid = attention & (ids != self.cls_id) & (ids != self.sep_id)
        return TokenBatch(ids, attention, valid)

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i not in self.special_ids)

    def export(self, directory: str) -> str:
        """Write `vocab.txt` (+ tokenizer_config.json) so `BertTokenizerFast.from_pretrained(directory)` gives the
        same ids (every word is a whole WordPiece token)."""
        import json
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "vocab.txt"), "w") as f:
            f.write("\n".join(self.vocab) + "\n")
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": True, "model_max_length": self.max_len, "tokenizer_class": "BertTokenizer"}, f)
        return directory


class HFTokenizer:
    """BERT WordPiece or CLIP BPE through transformers, from a local directory only."""

    def __init__(self, directory: str, kind: str, max_len: int):
        if kind not in ("bert", "clip"):
            raise ValueError(f"kind must be 'bert' or 'clip', got {kind!r}")
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"tokenizer directory not found: {directory}")
        needed = ("vocab.txt",) if kind == "bert" else ("vocab.json", "merges.txt")
        missing = [f for f in needed if not os.path.exists(os.path.join(directory, f))]
        if missing and not os.path.exists(os.path.join(directory, "tokenizer.json")):
            raise FileNotFoundError(f"{kind} tokenizer directory {directory} lacks {missing} (and tokenizer.json)")
        if kind == "bert":
            from transformers import BertTokenizerFast as cls
        else:
            from transformers import CLIPTokenizerFast as cls
        self.hf = cls.from_pretrained(directory)
        self.kind = kind
        self.max_len = max_len
        self.pad_id = int(self.hf.pad_token_id)
        self.mask_id = None if self.hf.mask_token_id is None else int(self.hf.mask_token_id)
        self.vocab_size = len(self.hf)
        self.special_ids = frozenset(int(i) for i in self.hf.all_special_ids)
        self.eot_id = int(self.hf.eos_token_id) if kind == "clip" else None

    def encode(self, texts: Sequence[str]) -> TokenBatch:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, got a single str")
        texts = list(texts)
        check_texts(texts)
        enc = self.hf(texts, padding="max_length", truncation=True, max_length=self.max_len,
                      return_special_tokens_mask=True, return_attention_mask=True)
        ids = np.asarray(enc["input_ids"], np.int32)
        attention = np.asarray(enc["attention_mask"], bool)
        if self.kind == "clip":
            eot = np.argmax(ids == self.eot_id, axis=1)  # FIRST EOT position
            if not np.all(ids[np.arange(len(ids)), eot] == self.eot_id):
                raise ValueError("CLIP encoding without an EOT token (max_len too small?)")
            pos = np.arange(ids.shape[1])[None, :]
            valid = (pos >= 1) & (pos < eot[:, None])
        else:
            valid = attention & ~np.asarray(enc["special_tokens_mask"], bool)
        return TokenBatch(ids, attention, valid)


def load_tokenizer(kind: str, *, directory: str | None = None, max_len: int = 20) -> Tokenizer:
    """`kind`: 'shapesworld' (word-level, no directory), 'bert' or 'clip' (local directory)."""
    if kind == "shapesworld":
        from mmjax.data.shapesworld.config import vocabulary_words
        return WordTokenizer(vocabulary_words(), max_len=max_len)
    if directory is None:
        raise ValueError(f"tokenizer kind {kind!r} needs a local directory")
    return HFTokenizer(directory, kind, max_len)
