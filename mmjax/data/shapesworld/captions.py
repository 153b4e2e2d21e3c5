"""Caption grammar, meaning vectors, truth semantics and the choice of 5 readings (docs/design.md#shapesworld-captions).

Meaning vector (width 10, −1 = absent; size −1 = not mentioned):
    [type, template, colour1, shape1, size1, colour2, shape2, size2, rel, cell]
Every caption and every non-order negative is rendered from a meaning (never by string editing), so articles are
always recomputed.
"""

from __future__ import annotations

import numpy as np

from mmjax.data.shapesworld.config import (
    COL_WORDS, COLOURS, RELATIONS, ROW_WORDS, SHAPES, SIZES, TEMPLATES_PER_TYPE, TYPE_O, TYPE_P, TYPE_R,
    ShapesWorldConfig)
from mmjax.data.shapesworld.scene import Scene, relation_holds, true_relations

Meaning = tuple[int, int, int, int, int, int, int, int, int, int]
NO_MEANING: Meaning = (-1,) * 10


def _np(colour: int, shape: int, size: int) -> str:
    words = ([SIZES[size]] if size >= 0 else []) + [COLOURS[colour], SHAPES[shape]]
    return " ".join(words)


def _article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def render(m: Meaning) -> str:
    """Text of a meaning vector."""
    typ, tpl, c1, s1, z1, c2, s2, z2, rel, cell = m
    np1 = _np(c1, s1, z1)
    if typ == TYPE_O:
        if tpl == 0:
            return _article(np1)
        if tpl == 1:
            return "there is " + _article(np1)
        row, col = divmod(cell, 3)
        return f"{_article(np1)} in the {ROW_WORDS[row]} {COL_WORDS[col]}"
    np2 = _np(c2, s2, z2)
    if typ == TYPE_P:
        text = f"{_article(np1)} and {_article(np2)}"
        return text if tpl == 0 else "there is " + text
    if typ == TYPE_R:
        r = RELATIONS[rel]
        if tpl == 0:
            return f"{_article(np1)} {r} {_article(np2)}"
        if tpl == 1:
            return f"the {np1} is {r} the {np2}"
        return f"there is {_article(np1)} {r} {_article(np2)}"
    raise ValueError(f"meaning type must be 0, 1 or 2, got {typ} in {m}")


def _matches(scene: Scene, colour: int, shape: int, size: int) -> list[int]:
    return [o for o in range(scene.num_objects)
            if scene.colour[o] == colour and scene.shape[o] == shape and (size < 0 or scene.size[o] == size)]


def truth(m, scene: Scene) -> bool:
    """Truth of a meaning on a scene (§4). Order negatives (meaning −1) have no truth value: raises."""
    typ, tpl, c1, s1, z1, c2, s2, z2, rel, cell = (int(v) for v in m) if isinstance(m, np.ndarray) else m
    if typ < 0:
        raise ValueError("truth() of an order perturbation (meaning −1) is undefined")
    first = _matches(scene, c1, s1, z1)
    if typ == TYPE_O:
        if tpl == 2:
            return any(scene.row[o] * 3 + scene.col[o] == cell for o in first)
        return bool(first)
    second = _matches(scene, c2, s2, z2)
    for a in first:
        for b in second:
            if a != b and (typ == TYPE_P or relation_holds(rel, scene, a, b)):
                return True
    return False


def mentioned_pairs(m) -> list[tuple[int, int]]:
    """(colour, shape) pairs a meaning mentions."""
    pairs = [(int(m[2]), int(m[3]))]
    if m[0] in (TYPE_P, TYPE_R):
        pairs.append((int(m[5]), int(m[6])))
    return pairs


def readings(scene: Scene) -> list[tuple[int, tuple[int, ...], int]]:
    """All readings as (type, referents, rel): O(o); P{a,b} (unordered, a<b); R(a,b,rel) for true relations."""
    n = scene.num_objects
    out = [(TYPE_O, (o,), -1) for o in range(n)]
    out += [(TYPE_P, (a, b), -1) for a in range(n) for b in range(a + 1, n)]
    out += [(TYPE_R, (a, b), rel) for a in range(n) for b in range(n) if a != b for rel in true_relations(scene, a, b)]
    return out


def choose_captions(rng: np.random.Generator, cfg: ShapesWorldConfig, scene: Scene) -> list[Meaning]:
    """5 distinct readings: one O, one P, one R, then type-weighted draws; greedy coverage of unmentioned objects."""
    pool = readings(scene)
    by_type = {t: [r for r in pool if r[0] == t] for t in (TYPE_O, TYPE_P, TYPE_R)}
    covered: set[int] = set()
    chosen = []
    weights = np.asarray(cfg.caption_type_weights, dtype=np.float64)
    for slot in range(cfg.captions_per_image):
        if slot < 3:
            typ = slot
        else:
            avail = np.array([len(by_type[t]) > 0 for t in range(3)])
            w = np.where(avail, weights, 0.0)
            typ = int(np.searchsorted(np.cumsum(w / w.sum()), rng.random(), side="right"))
            typ = min(typ, 2)
        cands = by_type[typ]
        gain = [len(set(r[1]) - covered) for r in cands]
        best = max(gain)
        top = [r for r, g in zip(cands, gain) if g == best]
        reading = top[int(rng.integers(len(top)))] if len(top) > 1 else top[0]
        cands.remove(reading)
        covered.update(reading[1])
        chosen.append(reading)
    return [_realise(rng, cfg, scene, r) for r in chosen]


def _realise(rng: np.random.Generator, cfg: ShapesWorldConfig, scene: Scene, reading) -> Meaning:
    typ, refs, rel = reading
    tpl = int(rng.integers(TEMPLATES_PER_TYPE[typ]))
    if typ == TYPE_P and rng.random() < 0.5:  # random text order of the unordered pair
        refs = refs[::-1]
    size_words = rng.random(len(refs)) < cfg.p_size_word
    fields = []
    for o, mention in zip(refs, size_words):
        fields += [scene.colour[o], scene.shape[o], scene.size[o] if mention else -1]
    if typ == TYPE_O:
        o = refs[0]
        cell = scene.row[o] * 3 + scene.col[o] if tpl == 2 else -1
        return (typ, tpl, *fields, -1, -1, -1, -1, cell)
    return (typ, tpl, *fields, rel if typ == TYPE_R else -1, -1)
