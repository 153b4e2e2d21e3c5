"""Training curves of a grid cell: every logged loss and validation RSUM of its run, kept in the cell record, so the
report can show that no cell collapses when hardest negatives come in (reproduce/README.md).

    curves = {"train": {"step": [...], "loss/<term>": [...]}, "val": {"step": [...], "val/rsum": [...]}}

`last_value(curves, key)` is a training metric at the end of the run (`END_KEYS`: the Flow-CLIP heads' mean
|s_L|, the size of the local branch's contribution to the score, and their logit scale).
`largest_val_drop(curves)` = max_i (max_{j ≤ i} v_j − v_i) over the validation RSUMs v: 0 for a curve that never
falls, the size of the fall for a run that collapses after a peak.
`plateau_step(curves)`: the first validation step from which every later validation RSUM is within `PLATEAU_WITHIN`
of the run's best (where the curve levels off; the budget check).
`collapse(curves)`: the run's best and last validation RSUM when the last is more than `COLLAPSE_DROP` below the best
(the validity rule of docs/reproduction/protocol.md, change list 2026-12-04), else None.
"""

from __future__ import annotations

import os

from mmjax.jsonl import read_jsonl

# Prefixes of the metrics.jsonl fields a record keeps as training curves: the loss terms, the validation RSUM (and its
# semantic-ground-truth form, the converged budget's selection metric), and
# for the Flow-CLIP heads the size of the local-branch score and the learned logit scale.
SELECT_BINDING_VAL = "val/shapesworld_suites/binding_mean/real"   # the Flow-CLIP study heads' selection metric
CURVE_KEYS = ("loss/", "val/rsum", "val/semantic/rsum", SELECT_BINDING_VAL, "mean_abs_s_local", "logit_scale")
END_KEYS = ("mean_abs_s_local", "logit_scale")   # their values at the last logged step join the report's evidence


def training_curves(workdir: str) -> dict:
    """{"train": {"step": [...], "loss/...": [...]}, "val": {"step": [...], "val/rsum": [...]}} from the cell's
    metrics.jsonl (every logged row; tens of rows at these budgets): the curves the report draws to show that no
    cell collapses when hardest negatives come in. {} without a metrics file."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    curves = {"train": {"step": []}, "val": {"step": []}}
    rows = read_jsonl(path)  # a killed run's cut-short last line is skipped, with a warning naming it
    for row in rows:
        part = "val" if "val/rsum" in row else "train"
        keys = [k for k in row if k.startswith(CURVE_KEYS) and isinstance(row[k], (int, float))]
        if part == "train" and not any(k.startswith("loss/") for k in keys):
            continue
        series, step = curves[part], int(row["step"])
        while series["step"] and series["step"][-1] >= step:  # a resumed run logs its last steps again: keep these
            for values in series.values():
                values.pop()
        n = len(series["step"])
        series["step"].append(step)
        for k in keys:
            series.setdefault(k, [None] * n).append(float(row[k]))
        for k in series:  # a key absent from this row stays aligned with the steps
            if len(series[k]) < n + 1:
                series[k].append(None)
    return curves


def val_key(curves: dict) -> str:
    """The validation RSUM a cell selected on: the semantic ground truth's where it was logged (the converged
    budgets), else the source's."""
    return SEMANTIC_VAL if any(v is not None for v in (curves.get("val") or {}).get(SEMANTIC_VAL, [])) else "val/rsum"


SEMANTIC_VAL = "val/semantic/rsum"


def val_values(curves: dict) -> list[float]:
    """The logged validation RSUMs (`val_key`) in step order."""
    return [v for v in (curves.get("val") or {}).get(val_key(curves), []) if v is not None]


def largest_val_drop(curves: dict) -> float | None:
    """max over validations of (best validation RSUM so far − this one), on `val_key`'s RSUM: 0 for a curve that
    never falls, large for a run that collapses after a peak; None without validations."""
    vals = val_values(curves)
    if not vals:
        return None
    best, drop = vals[0], 0.0
    for v in vals:
        best = max(best, v)
        drop = max(drop, best - v)
    return drop


PLATEAU_WITHIN = 2.0   # RSUM (≈ 0.4 %; a flat curve's validations differ by ≈ 1): levelled off this close


def plateau_step(curves: dict, within: float = PLATEAU_WITHIN) -> int | None:
    """The first validation step from which every later validation RSUM (`val_key`) is within `within` of the best
    one; None without validations."""
    val = curves.get("val") or {}
    points = [(s, v) for s, v in zip(val.get("step", []), val.get(val_key(curves), [])) if v is not None]
    if not points:
        return None
    best = max(v for _, v in points)
    first = points[-1][0]
    for step, v in reversed(points):
        if v < best - within:
            break
        first = step
    return first


# A run whose last validation RSUM is more than this fraction below its best collapsed: its best checkpoint is a
# warm-up or ramp one and a comparison with it does not test the method (protocol change list, 2026-12-04).
COLLAPSE_DROP = 0.10


def collapse(curves: dict) -> dict | None:
    """{"best", "end"}: the best and the last validation RSUM (`val_key`) of a run that ended more than
    `COLLAPSE_DROP` below its best; None for any other run, or one without validations."""
    vals = val_values(curves)
    if not vals or vals[-1] >= (1.0 - COLLAPSE_DROP) * max(vals):
        return None
    return {"best": max(vals), "end": vals[-1]}


def last_value(curves: dict, key: str) -> float | None:
    """The last logged training value of `key` (None when it was never logged)."""
    values = [v for v in (curves.get("train") or {}).get(key, []) if v is not None]
    return values[-1] if values else None
