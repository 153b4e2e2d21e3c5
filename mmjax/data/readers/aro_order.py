"""The four ARO word-order perturbations (COCO-Order / Flickr30k-Order), as in ARO's ``dataset_zoo/perturbations.py``.

For a caption c the candidates are ``[pre_caption(c, 30)] + [pre_caption(p(c), 30) for p in (shuffle nouns and
adjectives, shuffle all but nouns and adjectives, shuffle within trigrams, shuffle trigrams)]``:

* nouns and adjectives: POS-tag c; permute the tokens tagged NN/NNS/NNP/NNPS among themselves, then those tagged
  JJ/JJR/JJS among themselves; join with spaces.
* all but nouns and adjectives: permute every other token among themselves.
* within trigrams: word-tokenize c, cut into consecutive trigrams (last one shorter), shuffle inside each.
* trigrams: same trigrams, shuffle their order.

ARO uses spaCy ``en_core_web_sm`` tags and ``nltk.word_tokenize``; neither ships with mmjax. `OrderPerturber`
takes both as callables (``tagger(text) -> [(token, ptb_tag), ...]``, ``word_tokenize(text) -> [token, ...]``);
left as None, it loads spaCy / nltk and raises a clear ImportError when they are missing (never a silent
substitute). Randomness: ARO seeds the global ``np.random`` (noun/adjective permutations) and ``random`` (trigram
shuffles) with 1 in ``main_aro.py``; here a private ``np.random.RandomState(seed)`` and ``random.Random(seed)`` are
consumed in the same order (4 perturbations per caption, captions in file order), so with the same tagger and
tokenizer the candidates equal ARO's as long as ARO's process drew nothing else from those global streams.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
ADJ_TAGS = frozenset({"JJ", "JJR", "JJS"})

Tagger = Callable[[str], Sequence[tuple[str, str]]]
Tokenizer = Callable[[str], Sequence[str]]


def spacy_tagger(model: str = "en_core_web_sm") -> Tagger:
    try:
        import spacy  # noqa: PLC0415
    except ImportError as err:
        raise ImportError("ARO order tasks need spaCy and its 'en_core_web_sm' model for the noun/adjective "
                          "perturbations (pip install spacy; python -m spacy download en_core_web_sm), or pass "
                          "OrderPerturber(tagger=...)") from err
    nlp = spacy.load(model)
    return lambda text: [(tok.text, tok.tag_) for tok in nlp(text)]


def nltk_word_tokenize() -> Tokenizer:
    try:
        import nltk  # noqa: PLC0415
    except ImportError as err:
        raise ImportError("ARO order tasks need nltk (with the 'punkt' data) for the trigram perturbations, or "
                          "pass OrderPerturber(word_tokenize=...)") from err
    return nltk.word_tokenize


def _trigrams(tokens: Sequence[str]) -> list[list[str]]:
    return [list(tokens[i:i + 3]) for i in range(0, len(tokens), 3)]


class OrderPerturber:
    """Callable: caption -> the 4 perturbed captions (before ``pre_caption``), in ARO's order."""

    def __init__(self, seed: int = 1, tagger: Tagger | None = None, word_tokenize: Tokenizer | None = None):
        self.tagger = tagger if tagger is not None else spacy_tagger()
        self.word_tokenize = word_tokenize if word_tokenize is not None else nltk_word_tokenize()
        self._np_rng = np.random.RandomState(seed)
        self._py_rng = random.Random(seed)

    def shuffle_nouns_and_adj(self, text: str) -> str:
        tagged = list(self.tagger(text))
        words = np.array([t for t, _ in tagged])
        for tags in (NOUN_TAGS, ADJ_TAGS):
            idx = [i for i, (_, tag) in enumerate(tagged) if tag in tags]
            words[idx] = self._np_rng.permutation(words[idx])
        return " ".join(words)

    def shuffle_allbut_nouns_and_adj(self, text: str) -> str:
        tagged = list(self.tagger(text))
        words = np.array([t for t, _ in tagged])
        other = np.array([tag not in NOUN_TAGS and tag not in ADJ_TAGS for _, tag in tagged], dtype=bool)
        words[other] = self._np_rng.permutation(words[other])
        return " ".join(words)

    def shuffle_within_trigrams(self, text: str) -> str:
        grams = _trigrams(self.word_tokenize(text))
        for g in grams:
            self._py_rng.shuffle(g)
        return " ".join(" ".join(g) for g in grams)

    def shuffle_trigrams(self, text: str) -> str:
        grams = _trigrams(self.word_tokenize(text))
        self._py_rng.shuffle(grams)
        return " ".join(" ".join(g) for g in grams)

    def __call__(self, text: str) -> tuple[str, str, str, str]:
        return (self.shuffle_nouns_and_adj(text), self.shuffle_allbut_nouns_and_adj(text),
                self.shuffle_within_trigrams(text), self.shuffle_trigrams(text))
