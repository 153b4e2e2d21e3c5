"""Image-replacement controls Real / Shuffle / Fixed (docs/design.md#image-replacement-controls, paper Tab. 4).

Candidates and gold index stay with the original record; only the image changes. For each task separately:

    real      π(r) = r
    shuffle   π is a seeded derangement of the task's records with identity(π(r)) ≠ identity(r): up to `tries`
              random cyclic derangements (r → next record of a random cycle), each record keeping the first try
              that gives it a different identity; still-unmatched records draw uniformly among the records with a
              different identity; a record with none is excluded. All candidates of r use the one image π(r).
    fixed     π(r) = a, the first record after a seeded permutation (one anchor image per task); records sharing
              the anchor's identity are excluded.

Randomness: `np.random.default_rng([seed, crc32(task), condition id])`, so a task's permutation does not depend on the
other tasks in the list. For ARO VG tasks the replacement is the other record's *cropped* image (the image source is
the whole record, bbox included). Chance levels (1/m per record, `compositional.task_metrics`) are printed beside
every accuracy: accuracy above chance under replacement measures language priors the head keeps.
"""

from __future__ import annotations

import collections
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from mmjax.evaluation.compositional import GROUPS, score_records, summarize

CONDITIONS = ("real", "shuffle", "fixed")


def _task_rng(seed: int, task: str, condition: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(task.encode()), CONDITIONS.index(condition)])


def _shuffle(ids: np.ndarray, rng: np.random.Generator, tries: int) -> np.ndarray:
    n = len(ids)
    target = np.full(n, -1, np.int64)
    if n < 2:
        return target
    for _ in range(tries):
        order = rng.permutation(n)
        cycle = np.empty(n, np.int64)
        cycle[order] = np.roll(order, -1)  # order[i] -> order[i+1]: a derangement
        ok = (target < 0) & (ids[cycle] != ids)
        target[ok] = cycle[ok]
    for r in np.flatnonzero(target < 0):
        pool = np.flatnonzero(ids != ids[r])
        if pool.size:
            target[r] = rng.choice(pool)
    return target


def replacement_indices(records: Sequence, condition: str, *, seed: int = 0, tries: int = 4) -> np.ndarray:
    """int [n]: index of the record whose image replaces record r's, or −1 when r is excluded (module docstring)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; choose one of {CONDITIONS}")
    n = len(records)
    if condition == "real":
        return np.arange(n)
    out = np.full(n, -1, np.int64)
    by_task = collections.defaultdict(list)
    for i, rec in enumerate(records):
        by_task[rec.task].append(i)
    for task, members in by_task.items():
        members = np.asarray(members)
        ids = np.asarray([records[i].identity for i in members], object)
        rng = _task_rng(seed, task, condition)
        if condition == "shuffle":
            local = _shuffle(ids, rng, tries)
        else:
            anchor = int(rng.permutation(len(members))[0])
            local = np.where(ids != ids[anchor], anchor, -1)
        out[members] = np.where(local >= 0, members[np.maximum(local, 0)], -1)
    return out


def evaluate_with_controls(records: Sequence, score_fn: Callable, *, conditions: Sequence[str] = CONDITIONS,
                           seed: int = 0, tie_policy: dict | None = None, batch_size: int = 512,
                           keep_scores: bool = False, blind_score_fn: Callable | None = None, **options) -> dict:
    """Task and group accuracies under each condition, with chance levels.

    Returns {"conditions": {cond: {"tasks", "groups", "excluded": {task: count}}}, "chance": {task: percent},
    "table": printable text}; with `keep_scores`, each condition also holds "replacement" (int list) and
    "per_record" scores (None where excluded) for recomputation. With `blind_score_fn` (a text-only scorer,
    `mmjax.evaluation.blind`), "blind" holds its accuracies on the same records (one column: it ignores the image,
    so every condition gives it the same captions).
    """
    out = {"conditions": {}, "seed": seed}
    for cond in conditions:
        target = replacement_indices(records, cond, seed=seed)
        sources = [records[t] if t >= 0 else None for t in target]
        scores = score_records(records, score_fn, image_sources=sources, batch_size=batch_size)
        summary = summarize(records, scores, tie_policy=tie_policy, **options)
        excluded = collections.Counter(rec.task for rec, t in zip(records, target) if t < 0)
        summary["excluded"] = dict(excluded)
        if keep_scores:
            summary["replacement"] = [int(t) for t in target]
            summary["per_record"] = [None if s is None else [float(v) for v in s] for s in scores]
        out["conditions"][cond] = summary
    if blind_score_fn is not None:
        scores = score_records(records, blind_score_fn, batch_size=batch_size)
        out["blind"] = summarize(records, scores, tie_policy=tie_policy, **options)
    first = next(iter(out["conditions"].values()))
    out["chance"] = {task: m["chance"] for task, m in first["tasks"].items()}
    # A group's chance is the mean of its members' (ARO 4-task mean: (50 + 50 + 20 + 20)/4 = 35%).
    out["chance"].update({g: float(np.mean([out["chance"][m] for m in GROUPS[g]]))
                          for g in first["groups"] if all(m in out["chance"] for m in GROUPS[g])})
    out["table"] = format_controls_table(out)
    return out


def format_controls_table(result: dict) -> str:
    """Markdown table: one row per task (and group), one column per condition, the blind (text-only) baseline when
    the result has one, chance last."""
    columns = {c: result["conditions"][c] for c in result["conditions"]}
    if result.get("blind"):
        columns["blind (text only)"] = result["blind"]
    conds = list(columns)
    tasks = sorted({t for c in conds for t in columns[c]["tasks"]})
    groups = sorted({g for c in conds for g in columns[c]["groups"]})
    lines = ["| task | " + " | ".join(conds) + " | chance |", "|---" * (len(conds) + 2) + "|"]

    def cell(c, kind, name):
        table = columns[c][kind]
        value = table.get(name)
        if value is None:
            return "–"
        return f"{value['accuracy'] if isinstance(value, dict) else value:.2f}"

    def chance(value):
        return "–" if value is None else f"{value:.2f}"

    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(cell(c, "tasks", t) for c in conds)
                     + f" | {chance(result['chance'].get(t))} |")
    for g in groups:
        lines.append(f"| **{g}** | " + " | ".join(cell(c, "groups", g) for c in conds)
                     + f" | {chance(result['chance'].get(g))} |")
    return "\n".join(lines)
