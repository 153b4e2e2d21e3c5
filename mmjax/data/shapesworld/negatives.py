"""Typed hard negatives (docs/design.md#shapesworld-negatives) and the per-record Flow-CLIP training negative.

Non-order negatives are edits of the caption's *meaning*, rendered by the grammar and kept only if false on the
scene (truth checker) and, in the train split, if they mention no held-out pair. Order negatives are ARO-style token
permutations of the positive (`mertyg/vision-language-models-are-bows` `dataset_zoo/perturbations.py`); word classes
come from the grammar (nouns = shape words, adjectives = colour and size words), so no POS tagger is needed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mmjax.data.shapesworld.captions import NO_MEANING, Meaning, mentioned_pairs, render, truth
from mmjax.data.shapesworld.config import (
    COLOURS, NEG_TYPE_ID, NEG_TYPES, SHAPES, SIZES, TYPE_P, TYPE_R, ShapesWorldConfig)
from mmjax.data.shapesworld.scene import Scene

_NOUNS = frozenset(SHAPES)
_ADJECTIVES = frozenset(COLOURS + SIZES)
_FLIP = {0: 1, 1: 0, 2: 3, 3: 2}


@dataclasses.dataclass(frozen=True)
class Negative:
    type_id: int
    text: str
    meaning: Meaning  # NO_MEANING (all −1) for order perturbations


def _edit(m: Meaning, **changes) -> Meaning:
    names = ("type", "template", "c1", "s1", "z1", "c2", "s2", "z2", "rel", "cell")
    out = list(m)
    for k, v in changes.items():
        out[names.index(k)] = v
    return tuple(out)


def _acceptable(m: Meaning, scene: Scene, forbidden: frozenset) -> bool:
    if forbidden and any(p in forbidden for p in mentioned_pairs(m)):
        return False
    return not truth(m, scene)


def _replacements(m: Meaning, scene: Scene, which: str, forbidden: frozenset) -> list[Meaning]:
    """All single-np colour (or shape) replacements whose phrase matches no object of the scene.

    Such a phrase makes every caption type false, so no further truth check is needed (the tests re-check
    every negative with `truth`).
    """
    objects = list(zip(scene.colour, scene.shape, scene.size))
    nps = [(2, 3, 4)] + ([(5, 6, 7)] if m[0] in (TYPE_P, TYPE_R) else [])
    out = []
    for ci, si, zi in nps:
        target = ci if which == "colour" else si
        for v in range(len(COLOURS) if which == "colour" else len(SHAPES)):
            if m[target] == v:
                continue
            new = list(m)
            new[target] = v
            c, s, z = new[ci], new[si], new[zi]
            if any(oc == c and os_ == s and (z < 0 or oz == z) for oc, os_, oz in objects):
                continue
            new = tuple(new)
            if forbidden and any(p in forbidden for p in mentioned_pairs(new)):
                continue
            out.append(new)
    return out


def meaning_negatives(rng: np.random.Generator, m: Meaning, scene: Scene, forbidden: frozenset) -> list[Negative]:
    """Types 0–6 that apply to `m` and yield a false, allowed meaning."""
    typ = m[0]
    out = []

    def add(name, cand):
        if cand is not None and _acceptable(cand, scene, forbidden):
            out.append(Negative(NEG_TYPE_ID[name], render(cand), cand))

    if typ in (TYPE_P, TYPE_R):
        if m[2] != m[5]:
            add("swap_att", _edit(m, c1=m[5], c2=m[2]))
        if m[4] >= 0 and m[7] >= 0 and m[4] != m[7]:
            add("swap_size", _edit(m, z1=m[7], z2=m[4]))
    if typ == TYPE_R:
        if m[3] != m[6]:
            add("swap_obj", _edit(m, s1=m[6], s2=m[3]))
        add("rel_flip", _edit(m, rel=_FLIP[m[8]]))
        add("rel_swap", _edit(m, c1=m[5], s1=m[6], z1=m[7], c2=m[2], s2=m[3], z2=m[4]))
    for name, which in (("replace_att", "colour"), ("replace_obj", "shape")):
        cands = _replacements(m, scene, which, forbidden)
        if cands:
            cand = cands[int(rng.integers(len(cands)))]
            out.append(Negative(NEG_TYPE_ID[name], render(cand), cand))
    return out


def _permute_positions(rng, tokens: list[str], positions: list[int]) -> None:
    if len(positions) > 1:
        values = [tokens[p] for p in positions]
        for p, j in zip(positions, rng.permutation(len(positions))):
            tokens[p] = values[j]


def _order_candidate(rng, kind: int, words: list[str]) -> list[str]:
    tokens = list(words)
    if kind == 1:
        _permute_positions(rng, tokens, [i for i, w in enumerate(words) if w in _NOUNS])
        _permute_positions(rng, tokens, [i for i, w in enumerate(words) if w in _ADJECTIVES])
        return tokens
    if kind == 2:
        _permute_positions(rng, tokens, [i for i, w in enumerate(words) if w not in _NOUNS and w not in _ADJECTIVES])
        return tokens
    trigrams = [tokens[i:i + 3] for i in range(0, len(tokens), 3)]
    if kind == 3:
        return [t[j] for t in trigrams for j in rng.permutation(len(t))]
    return [w for j in rng.permutation(len(trigrams)) for w in trigrams[j]]


def order_negatives(rng: np.random.Generator, text: str, retries: int,
                    forbidden: frozenset = frozenset()) -> list[Negative]:
    """ARO's four perturbations; all-or-nothing (a caption gets an order set only if all four succeed).

    A candidate must differ from the original and the earlier options; in the train split it must also not
    create a held-out "colour shape" bigram (train negatives never mention a held-out pair).
    """
    words = text.split()
    bigrams = {f"{COLOURS[c]} {SHAPES[s]}" for c, s in forbidden}
    seen = {text}
    out = []
    for kind in (1, 2, 3, 4):
        for _ in range(retries):
            tokens = _order_candidate(rng, kind, words)
            cand = " ".join(tokens)
            if cand not in seen and not (bigrams and any(
                    f"{a} {b}" in bigrams for a, b in zip(tokens[:-1], tokens[1:]))):
                break
        else:
            return []
        seen.add(cand)
        out.append(Negative(NEG_TYPE_ID[f"order_{kind}"], cand, NO_MEANING))
    return out


def caption_negatives(rng, cfg: ShapesWorldConfig, m: Meaning, text: str, scene: Scene, split: str) -> list[Negative]:
    forbidden = cfg.heldout_ids if (split == "train" and cfg.exclude_heldout_in_train_negatives) else frozenset()
    return meaning_negatives(rng, m, scene, forbidden) + order_negatives(rng, text, cfg.order_retries, forbidden)


def pick_training_negative(u: float, cfg: ShapesWorldConfig, negatives: list[Negative]) -> int:
    """Index into `negatives` of the training negative (weights renormalised over available types), or −1."""
    weights = dict(cfg.train_negative_types)
    avail = [(i, weights[NEG_TYPES[neg.type_id]]) for i, neg in enumerate(negatives)
             if weights.get(NEG_TYPES[neg.type_id], 0.0) > 0]
    if not avail:
        return -1
    total = sum(w for _, w in avail)
    acc = 0.0
    for i, w in avail:
        acc += w / total
        if u < acc:
            return i
    return avail[-1][0]
