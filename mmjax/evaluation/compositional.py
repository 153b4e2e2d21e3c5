"""Compositional benchmarks over `CompositionalRecord`s (docs/design.md#compositional-evaluation,
docs/design.md#shapesworld-suites).

A record is (image, candidates c_0..c_{m−1}, gold g). Every candidate is scored with a pair scorer s(I, c)
(`mmjax.evaluation.scorers`); the record is correct under the task's tie policy:

    argmax_first   argmax_k s_k = g with np.argmax semantics (ties go to the lowest index)   ARO, What's Up
    strict         s_g > max_{k≠g} s_k (ties are wrong)                                      default
    geq            s_g ≥ max_{k≠g} s_k (ties are right)                                      CLEVR

Task metrics (percent; `accuracy` is the number each paper reports, the others are kept for comparison):

    vg_relation      macro over relation names, excluding the ARO notebook's 157 "symmetric" relations
                     (`VGR_EXCLUDE`); also `macro_all` (no exclusion, LABCLIP convention) and `micro`
    vg_attribution   macro over "a1_a2" groups with ≥ 25 records (`vga_min_count`); also `macro_all`, `micro`
    coco_order, flickr30k_order, abc6k, clevr, pug, negclip, ShapesWorld tasks   micro
    sugarcrepe       mean of the per-subset accuracies (also each subset, reported as task "sugarcrepe/<subset>")
    coco_spatial, gqa_spatial   mean(one_obj, two_obj)
    winoground       text = s(c0,i0) > s(c1,i0) ∧ s(c1,i1) > s(c0,i1); image = s(c0,i0) > s(c0,i1) ∧
                     s(c1,i1) > s(c1,i0); group = text ∧ image (strict); accuracy = group

Every task also reports `micro`, `n`, `chance` (= 100·mean 1/m; Winoground 25/25/16.7), `by_subgroup` and, when
records carry `meta['unseen']` (ShapesWorld), `seen` / `unseen` accuracies. Groups (`GROUPS`): aro4 (the paper's ARO
average), binding5, nonaro6 — means of member accuracies, reported only when every member was evaluated.

Per-record scores are returned (`per_record`) so `summarize` can recompute any variant without re-scoring.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Sequence

import numpy as np

from mmjax.batching import progress

log = logging.getLogger(__name__)

TIE_POLICIES = ("argmax_first", "strict", "geq")
DEFAULT_TIE_POLICY = {"vg_relation": "argmax_first", "vg_attribution": "argmax_first", "coco_order": "argmax_first",
                      "flickr30k_order": "argmax_first", "coco_spatial": "argmax_first",
                      "gqa_spatial": "argmax_first", "controlled_a": "argmax_first", "controlled_b": "argmax_first",
                      "clevr": "geq"}  # every other task: strict
# mertyg/vision-language-models-are-bows, notebooks/"Replicate ARO! VG-Relation, VG-Attribution.ipynb" (`symmetric`).
VGR_EXCLUDE = frozenset((
    'adjusting', 'attached to', 'between', 'bigger than', 'biting', 'boarding', 'brushing', 'chewing', 'cleaning',
    'climbing', 'close to', 'coming from', 'coming out of', 'contain', 'crossing', 'dragging', 'draped over',
    'drinking', 'drinking from', 'driving', 'driving down', 'driving on', 'eating from', 'eating in', 'enclosing',
    'exiting', 'facing', 'filled with', 'floating in', 'floating on', 'flying', 'flying above', 'flying in',
    'flying over', 'flying through', 'full of', 'going down', 'going into', 'going through', 'grazing in',
    'growing in', 'growing on', 'guiding', 'hanging from', 'hanging in', 'hanging off', 'hanging over', 'higher than',
    'holding onto', 'hugging', 'in between', 'jumping off', 'jumping on', 'jumping over', 'kept in', 'larger than',
    'leading', 'leaning over', 'leaving', 'licking', 'longer than', 'looking in', 'looking into', 'looking out',
    'looking over', 'looking through', 'lying next to', 'lying on top of', 'making', 'mixed with', 'mounted on',
    'moving', 'on the back of', 'on the edge of', 'on the front of', 'on the other side of', 'opening', 'painted on',
    'parked at', 'parked beside', 'parked by', 'parked in', 'parked in front of', 'parked near', 'parked next to',
    'perched on', 'petting', 'piled on', 'playing', 'playing in', 'playing on', 'playing with', 'pouring',
    'reaching for', 'reading', 'reflected on', 'riding on', 'running in', 'running on', 'running through',
    'seen through', 'sitting behind', 'sitting beside', 'sitting by', 'sitting in front of', 'sitting near',
    'sitting next to', 'sitting under', 'skiing down', 'skiing on', 'sleeping in', 'sleeping on', 'smiling at',
    'sniffing', 'splashing', 'sprinkled on', 'stacked on', 'standing against', 'standing around', 'standing behind',
    'standing beside', 'standing in front of', 'standing near', 'standing next to', 'staring at', 'stuck in',
    'surrounding', 'swimming in', 'swinging', 'talking to', 'topped with', 'touching', 'traveling down',
    'traveling on', 'tying', 'typing on', 'underneath', 'wading in', 'waiting for', 'walking across', 'walking by',
    'walking down', 'walking next to', 'walking through', 'working in', 'working on', 'worn on', 'wrapped around',
    'wrapped in', 'by', 'of', 'near', 'next to', 'with', 'beside', 'on the side of', 'around'))
GROUPS = {
    "aro4": ("vg_relation", "vg_attribution", "coco_order", "flickr30k_order"),
    "binding5": ("sugarcrepe/swap_obj", "sugarcrepe/swap_att", "abc6k", "clevr", "pug"),
    "nonaro6": ("sugarcrepe/swap_obj", "sugarcrepe/swap_att", "abc6k", "coco_spatial", "gqa_spatial",
                "sugarcrepe/replace_rel"),
}


def is_correct(scores, gold: int, policy: str) -> bool:
    """Gold-preference under a tie policy (module docstring)."""
    if policy not in TIE_POLICIES:
        raise ValueError(f"unknown tie policy {policy!r}; choose one of {TIE_POLICIES}")
    s = np.asarray(scores, np.float64)
    if policy == "argmax_first":
        return int(np.argmax(s)) == gold
    others = np.delete(s, gold)
    if others.size == 0:
        return True
    if policy == "strict":
        return bool(s[gold] > others.max())
    return bool(s[gold] >= others.max())  # geq


def score_records(records: Sequence, score_fn: Callable, *, image_sources: Sequence | None = None,
                  batch_size: int = 512) -> list[np.ndarray | None]:
    """Scores of every candidate of every record, [m_r] per record; None where `image_sources[r]` is None.

    `image_sources[r]` is the record whose image replaces record r's (default: r itself); candidates and gold stay r's.
    All (image, caption) pairs are flattened and scored in batches of `batch_size` pairs.
    """
    sources = list(records) if image_sources is None else list(image_sources)
    if len(sources) != len(records):
        raise ValueError(f"{len(sources)} image sources for {len(records)} records")
    pair_img, pair_cap, owner = [], [], []
    for r, (rec, src) in enumerate(zip(records, sources)):
        if src is None:
            continue
        pair_img.extend([src] * len(rec.captions))
        pair_cap.extend(rec.captions)
        owner.extend([r] * len(rec.captions))
    flat = np.empty(len(pair_cap), np.float32)
    bar = progress(len(pair_cap), "[eval] score records", unit="pair")
    for start in range(0, len(pair_cap), batch_size):
        stop = min(start + batch_size, len(pair_cap))
        flat[start:stop] = np.asarray(score_fn(pair_img[start:stop], pair_cap[start:stop]), np.float32)
        bar.update(stop - start)
    bar.close()
    if not np.all(np.isfinite(flat)):
        raise ValueError(f"score_fn returned {np.sum(~np.isfinite(flat))} non-finite scores")
    out: list = [None] * len(records)
    owner = np.asarray(owner, np.int64)
    bounds = np.searchsorted(owner, np.arange(len(records) + 1))
    for r in range(len(records)):
        if sources[r] is not None:
            out[r] = flat[bounds[r]:bounds[r + 1]]
    return out


def _acc(flags) -> float:
    return float(100.0 * np.mean(flags)) if len(flags) else float("nan")


def _by(records, flags, key: Callable) -> dict:
    groups = collections.defaultdict(list)
    for rec, ok in zip(records, flags):
        groups[key(rec)].append(ok)
    return {str(g): {"n": len(v), "accuracy": _acc(v)} for g, v in sorted(groups.items(), key=lambda kv: str(kv[0]))}


def _winoground(records, scores) -> dict:
    by_example = collections.defaultdict(dict)
    for rec, s in zip(records, scores):
        by_example[rec.meta.get("example_id")][rec.meta.get("position")] = s
    text, image = [], []
    for pos in by_example.values():
        if set(pos) != {0, 1}:
            continue  # one image of the example was excluded (controls): no image/group score
        s0, s1 = pos[0], pos[1]  # s_k[j] = s(c_j, i_k)
        text.append(s0[0] > s0[1] and s1[1] > s1[0])
        image.append(s0[0] > s1[0] and s1[1] > s0[1])
    group = [t and i for t, i in zip(text, image)]
    return {"n": len(text), "text": _acc(text), "image": _acc(image), "group": _acc(group), "accuracy": _acc(group),
            "chance": 25.0, "chance_image": 25.0, "chance_group": 100.0 / 6.0, "tie_policy": "strict"}


def task_metrics(task: str, records: Sequence, scores: Sequence, *, tie_policy: str | None = None,
                 vgr_exclude=VGR_EXCLUDE, vga_min_count: int = 25, train_identities=None) -> dict:
    """Metrics of one task from its records and per-record scores (module docstring). `train_identities`: image
    identities seen in training (ABC-6K: Karpathy train) — adds `train_disjoint` accuracy over the other records."""
    if task == "winoground":
        return _winoground(records, scores)
    policy = tie_policy or DEFAULT_TIE_POLICY.get(task, "strict")
    flags = [is_correct(s, r.correct, policy) for r, s in zip(records, scores)]
    out = {"n": len(flags), "micro": _acc(flags), "tie_policy": policy,
           "chance": float(100.0 * np.mean([1.0 / len(r.captions) for r in records])) if records else float("nan")}
    if any(r.subgroup is not None for r in records):
        out["by_subgroup"] = _by(records, flags, lambda r: r.subgroup)
    sub = out.get("by_subgroup", {})
    if task == "vg_relation":
        kept = [g["accuracy"] for name, g in sub.items() if name not in vgr_exclude]
        out["macro"], out["macro_all"] = float(np.mean(kept)) if kept else float("nan"), _mean_acc(sub)
        out["accuracy"], out["macro_groups"] = out["macro"], len(kept)
    elif task == "vg_attribution":
        kept = [g["accuracy"] for g in sub.values() if g["n"] >= vga_min_count]
        out["macro"], out["macro_all"] = float(np.mean(kept)) if kept else float("nan"), _mean_acc(sub)
        out["accuracy"], out["macro_groups"] = out["macro"], len(kept)
    elif task in ("sugarcrepe", "coco_spatial", "gqa_spatial"):
        out["accuracy"] = _mean_acc(sub)  # SugarCrepe: mean of subsets; What's Up: mean(one_obj, two_obj)
    else:
        out["accuracy"] = out["micro"]
    if any("unseen" in r.meta for r in records):
        split = _by(records, flags, lambda r: "unseen" if r.meta.get("unseen") else "seen")
        out.update({k: v["accuracy"] for k, v in split.items()})
    if train_identities is not None:
        keep = [ok for r, ok in zip(records, flags) if r.identity not in train_identities]
        out["train_disjoint"], out["train_disjoint_n"] = _acc(keep), len(keep)
    return out


def _mean_acc(sub: dict) -> float:
    return float(np.mean([g["accuracy"] for g in sub.values()])) if sub else float("nan")


def summarize(records: Sequence, scores: Sequence, *, tie_policy: dict | None = None, **options) -> dict:
    """{"tasks": {task: metrics}, "groups": {name: mean}} from stored per-record scores (None = excluded record).

    SugarCrepe subsets also appear as tasks "sugarcrepe/<subset>" so the task groups can use them."""
    tie_policy = tie_policy or {}
    by_task = collections.defaultdict(lambda: ([], []))
    for rec, s in zip(records, scores):
        if s is not None:
            by_task[rec.task][0].append(rec)
            by_task[rec.task][1].append(s)
    tasks = {}
    for task in sorted(by_task):
        recs, sc = by_task[task]
        tasks[task] = task_metrics(task, recs, sc, tie_policy=tie_policy.get(task), **options)
        if task == "sugarcrepe":
            for subset in sorted({r.subgroup for r in recs}):
                idx = [i for i, r in enumerate(recs) if r.subgroup == subset]
                tasks[f"sugarcrepe/{subset}"] = task_metrics(task, [recs[i] for i in idx], [sc[i] for i in idx],
                                                             tie_policy=tie_policy.get(task))
    groups = {name: float(np.mean([tasks[m]["accuracy"] for m in members]))
              for name, members in GROUPS.items() if all(m in tasks for m in members)}
    return {"tasks": tasks, "groups": groups}


def evaluate_records(records: Sequence, score_fn: Callable, *, tie_policy: dict | None = None,
                     image_sources: Sequence | None = None, batch_size: int = 512, keep_scores: bool = True,
                     **options) -> dict:
    """Scores and summarises records: `summarize(...)` plus "per_record" (task, gold, scores; JSON-ready)."""
    scores = score_records(records, score_fn, image_sources=image_sources, batch_size=batch_size)
    out = summarize(records, scores, tie_policy=tie_policy, **options)
    if keep_scores:
        out["per_record"] = [None if s is None else {"task": r.task, "correct": r.correct,
                                                     "scores": [float(v) for v in s]}
                             for r, s in zip(records, scores)]
    return out
