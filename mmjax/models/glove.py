"""Read word vectors in the GloVe text format into an embedding matrix for a vocabulary.

Format: one word per line, `word v_1 … v_E` separated by single spaces (a few GloVe 840B tokens contain spaces, so the
last E fields are the vector and the rest is the word). E is taken from `dim` or from the first line.

Words absent from the file are looked up once more after the reference's "quick-and-dirty" normalisation (drop '-',
'.', "'" and keep the part before '/'; `kdwonn/DivE` `model_spm.py` `EncoderText.init_weights`); still-missing rows
get U(−0.1, 0.1) like the reference's random init. The file is streamed; only vocabulary words are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np


def _fallback_form(word: str) -> str:
    word = word.replace("-", "").replace(".", "").replace("'", "")
    return word.split("/")[0] if "/" in word else word


def read_glove(path: str | os.PathLike, vocab: Sequence[str] | Mapping[str, int], dim: int | None = None,
               seed: int = 0, normalize_missing: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Embedding matrix for `vocab` (a list of words in id order, or a word → id mapping with ids 0..V-1).

    Returns (matrix float32 [V, E], found bool [V]). Raises ValueError on a malformed line (with its number) or a
    vocabulary whose ids are not 0..V-1.
    """
    word_to_id = dict(vocab) if isinstance(vocab, Mapping) else {w: i for i, w in enumerate(vocab)}
    size = len(word_to_id)
    if sorted(word_to_id.values()) != list(range(size)):
        raise ValueError("vocab ids must be exactly 0..V-1")
    wanted: dict[str, list[int]] = {}
    for word, idx in word_to_id.items():
        wanted.setdefault(word, []).append(idx)
    if normalize_missing:
        for word, idx in word_to_id.items():
            fallback = _fallback_form(word)
            if fallback != word and fallback not in word_to_id:
                wanted.setdefault(fallback, []).append(idx)

    vectors: dict[int, np.ndarray] = {}
    exact: set[int] = set()
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.rstrip("\n").rstrip(" ").split(" ")
            if dim is None:
                dim = len(fields) - 1
            if len(fields) < dim + 1:
                raise ValueError(f"{path}:{line_no}: expected a word and {dim} numbers, got {len(fields)} fields")
            word = " ".join(fields[:-dim])
            if word not in wanted:
                continue
            try:
                vec = np.asarray(fields[-dim:], dtype=np.float32)
            except ValueError as err:
                raise ValueError(f"{path}:{line_no}: non-numeric vector entry ({err})") from None
            for idx in wanted[word]:
                is_exact = word_to_id.get(word) == idx
                if is_exact or (idx not in exact and idx not in vectors):
                    vectors[idx] = vec
                    if is_exact:
                        exact.add(idx)
    if dim is None:
        raise ValueError(f"{path} is empty and no dim was given")

    rng = np.random.default_rng(seed)
    matrix = rng.uniform(-0.1, 0.1, size=(size, dim)).astype(np.float32)
    found = np.zeros(size, bool)
    for idx, vec in vectors.items():
        matrix[idx] = vec
        found[idx] = True
    return matrix, found
