"""The Flow-CLIP study's gates, budget and verdicts, exactly as docs/reproduction/flowclip_protocol.md declares them.

    build(records_by_budget) -> {"pilot": ..., "gates": {base: ...}, "rows": [...], "controls": {base: ...},
                                 "head_budgets": {cell: ...}}

(its report section: `reproduce.flowclip_report.section`; its figure: `reproduce.flowclip_figures`)

Cells (`reproduce.grid`, group 'fcstudy'): `fcs_base_<B>` (the frozen base B ∈ {P, R}, seed 0) and `fcs_<B>_<head>`
(head seeds 0–4 on it). Metrics per record are `reproduce.metrics.cell_metrics` of its best-on-validation parameters:
`probe/<label>/*` and `grounding/*` (the base's local probes), `suite/<suite>/<condition|blind|chance>`,
`binding_<condition>` (the binding mean) and `blind/holdout_pair_accuracy`.
"""

from __future__ import annotations

import math

import numpy as np

from reproduce import stats
from reproduce.curves import SELECT_BINDING_VAL
from reproduce.grid import FCSTUDY_2E_SUFFIX, FCSTUDY_BASES

BASES = tuple(b for b, _, _ in FCSTUDY_BASES)
BUDGET = "flowclip"  # the study heads' budget (the pilot's is "flowclip_pilot")
HEADS = ("globalm_hnb", "globalm_cimr", "flowclip_hnb", "flowclip_cimr")
PILOT_BASE = "R"
# The heads the pilot and the study train (protocol change list, 2026-12-02: gate 1 fails on both bases, so the
# binding rows need no Global-M heads; the budget rule applies to these two).
PILOT_HEADS = ("flowclip_hnb", "flowclip_cimr")
PLATEAU_POINTS = 0.5      # the pilot's plateau: no later validation beats the best so far by more than this
MAX_EPOCHS = 5
PROBE_MARGIN = 20.0       # gate 1: probe accuracy ≥ majority rate + 20 points (colour, shape; cell for relation)
GROUNDING_MARGIN = 10.0   # gate 1: word → token grounding ≥ area chance + 10 points
BLIND_MARGIN = 5.0        # gate 2: a suite's blind accuracy ≥ chance + 5 points ...
BLIND_HOLDOUT = 55.0      # ... and the blind model's held-out pair accuracy ≥ 55 %
GAIN = 2.0                # FB/FR: the declared size of the gain (points)
EQUIV_MARGIN = 1.0        # FC3: Real kept within ±1 point
REMOVED_SHARE = 0.5       # FC1/FC2: CIMR removes at least half of the excess over chance
HEAD_SEEDS = (0, 1, 2, 3, 4)   # the declared head seeds: each row is tested once, on these five pairs
CONTROL_SUITES = ("binding", "binding_swap_obj", "binding_swap_size", "relation", "relation_rel_swap", "replace_att",
                  "replace_obj", "order")

ROWS = (  # id, statement, (head a, head b), kind, quantity label
    ("FB1", "binding gain, HNB + CIMR heads", ("globalm_cimr", "flowclip_cimr"), "gain", "binding mean, Real"),
    ("FB2", "binding gain, HNB heads", ("globalm_hnb", "flowclip_hnb"), "gain", "binding mean, Real"),
    ("FR1", "relation gain, HNB + CIMR heads", ("globalm_cimr", "flowclip_cimr"), "gain", "relation suite, Real"),
    ("FC1", "CIMR removes Shuffle's excess over chance", ("flowclip_hnb", "flowclip_cimr"), "removed:shuffle",
     "(a − b) − ½ (a − chance), Shuffle, prior-bearing suites"),
    ("FC2", "CIMR removes Fixed's excess over chance", ("flowclip_hnb", "flowclip_cimr"), "removed:fixed",
     "(a − b) − ½ (a − chance), Fixed, prior-bearing suites"),
    ("FC3", "CIMR keeps matched-image accuracy", ("flowclip_hnb", "flowclip_cimr"), "kept",
     "Real accuracy, prior-bearing suites, margin ±1"),
)


def head_cell(base: str, head: str) -> str:
    return f"fcs_{base}_{head}"


# ---- the pilot: the heads' budget ----------------------------------------------------------------------------------

def plateau_epoch(steps, values, steps_per_epoch: float, max_epochs: int = MAX_EPOCHS) -> int:
    """The smallest whole number of epochs E after which no validation beats the best up to E by more than
    `PLATEAU_POINTS` (the protocol's budget rule for one head), capped at `max_epochs`."""
    pts = [(s / steps_per_epoch, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    for e in range(1, max_epochs + 1):
        before = [v for x, v in pts if x <= e + 1e-9]
        after = [v for x, v in pts if x > e + 1e-9]
        if before and (not after or max(after) - max(before) <= PLATEAU_POINTS):
            return e
    return max_epochs


def pilot(records: list[dict]) -> dict:
    """{"heads": {head: {"epoch", "best", "steps", "values"}}, "epochs": E} from the pilot's records (seed 0 of each
    head on base `PILOT_BASE`); E = the largest of the `PILOT_HEADS`' plateau epochs (None until both have run)."""
    heads = {}
    for r in records:
        head = r["name"].removeprefix(f"fcs_{PILOT_BASE}_")
        val = (r.get("curves") or {}).get("val") or {}
        if head not in HEADS or not val.get(SELECT_BINDING_VAL):
            continue
        epochs = r["budget_detail"]["num_epochs"]
        per_epoch = max(val["step"]) / epochs if epochs else float("nan")
        values = val[SELECT_BINDING_VAL]
        heads[head] = {"epoch": plateau_epoch(val["step"], values, per_epoch), "steps": val["step"],
                       "values": values, "steps_per_epoch": per_epoch,
                       "best": max(v for v in values if v is not None)}
    ran = [h for h in PILOT_HEADS if h in heads]
    return {"heads": heads, "epochs": max(heads[h]["epoch"] for h in ran) if len(ran) == len(PILOT_HEADS) else None}


def late_rise(record: dict) -> dict | None:
    """One study head's budget evidence from its validation curve on the selection metric: `best_epoch` (where its
    best validation falls, in epochs), `still_rising` (that best falls in the last epoch: the protocol's flag) and
    `late_rise` (the last epoch's best minus the best before it, the quantity the pilot's plateau rule bounds by
    `PLATEAU_POINTS`). None without a curve."""
    val = (record.get("curves") or {}).get("val") or {}
    pts = [(s, v) for s, v in zip(val.get("step") or [], val.get(SELECT_BINDING_VAL) or [])
           if v is not None and math.isfinite(v)]
    epochs = (record.get("budget_detail") or {}).get("num_epochs")
    if not pts or not epochs:
        return None
    last = max(s for s, _ in pts)
    per_epoch = last / epochs
    best_step, _ = max(pts, key=lambda p: (p[1], -p[0]))     # the first step that reaches the best
    before = [v for s, v in pts if s <= last - per_epoch + 1e-9]
    in_last = [v for s, v in pts if s > last - per_epoch + 1e-9]
    return {"best_epoch": best_step / per_epoch, "still_rising": best_step > last - per_epoch + 1e-9,
            "late_rise": (max(in_last) - max(before)) if before and in_last else None, "epochs": epochs}


def head_budgets(records: list[dict]) -> dict:
    """{cell: {"seeds", "epochs", "best_epoch" (mean), "still_rising" (count), "late_rise" (mean), "late_rise_max"}}
    over the study's head records of one budget (bases excluded)."""
    per: dict = {}
    for r in records:
        if r["name"].startswith("fcs_base_"):
            continue
        x = late_rise(r)
        if x is not None:
            per.setdefault(r["name"], []).append(x)
    out = {}
    for name, xs in sorted(per.items()):
        rises = [x["late_rise"] for x in xs if x["late_rise"] is not None]
        out[name] = {"seeds": len(xs), "epochs": xs[0]["epochs"], "best_epoch": _mean(x["best_epoch"] for x in xs),
                     "still_rising": sum(x["still_rising"] for x in xs), "late_rise": _mean(rises),
                     "late_rise_max": max(rises) if rises else None}
    return out


# ---- gates -----------------------------------------------------------------------------------------------------

def _mean(values):
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def gates(cells: dict, base: str) -> dict:
    """Gate 1 (the base's probes) and gate 2 (the heads' blind columns) of one base."""
    m = (cells.get(f"fcs_base_{base}") or {}).get(0)
    out: dict = {"base_run": m is not None}
    if m is not None:
        probes = {k: (m.get(f"probe/{k}/accuracy"), m.get(f"probe/{k}/majority"))
                  for k in ("colour", "shape", "size", "cell", "on_object")}
        grounding = (m.get("grounding/accuracy"), m.get("grounding/chance_area"), m.get("grounding/chance_uniform"))
        ok = {k: a is not None and b is not None and a >= b + PROBE_MARGIN for k, (a, b) in probes.items()}
        g_ok = grounding[0] is not None and grounding[1] is not None and grounding[0] >= grounding[1] + GROUNDING_MARGIN
        out.update(probes=probes, grounding=grounding, binding=ok["colour"] and ok["shape"] and g_ok,
                   relation=ok["colour"] and ok["shape"] and g_ok and ok["cell"])
    heads = [seeds for h in HEADS for seeds in [(cells.get(head_cell(base, h)) or {})] if seeds]
    recs = [m for seeds in heads for m in seeds.values()]
    blind = {s: (_mean(r.get(f"suite/{s}/blind") for r in recs), _mean(r.get(f"suite/{s}/chance") for r in recs))
             for s in CONTROL_SUITES}
    holdout = _mean(r.get("blind/holdout_pair_accuracy") for r in recs)
    prior = [s for s, (b, c) in blind.items() if b is not None and c is not None and b >= c + BLIND_MARGIN]
    out.update(blind=blind, holdout=holdout,
               prior_suites=prior if holdout is not None and holdout >= BLIND_HOLDOUT else [])
    return out


_NOT_YET = ("the base has not run", "its heads have not run yet (the blind column comes from their test tables)")


def _gate_reason(g: dict, kind: str) -> str | None:
    """Why a row cannot be decided on this base (None: its gate passes); the reasons in _NOT_YET mean 'not run'."""
    if kind in ("gain_binding", "gain_relation"):
        if not g.get("base_run"):
            return _NOT_YET[0]
        if not g[kind.split("_")[1]]:
            p = g["probes"]
            return ("local tokens lack the evidence: " + ", ".join(
                f"{k} probe {a:.1f} vs majority {b:.1f}" for k, (a, b) in p.items()
                if k in ("colour", "shape", "cell") and a is not None and b is not None)
                + (f"; grounding {g['grounding'][0]:.1f} vs area chance {g['grounding'][1]:.1f}"
                   if g["grounding"][0] is not None else ""))
        return None
    if not g["prior_suites"]:
        if g["holdout"] is None:
            return _NOT_YET[1]
        return (f"no prior-bearing suite: blind held-out pair accuracy {g['holdout']:.1f} %, best suite margin "
                + (f"{max((b - c for b, c in g['blind'].values() if b is not None and c is not None)):+.1f}"
                   if any(b is not None for b, _ in g["blind"].values()) else "–") + " points over chance")
    return None


# ---- rows ------------------------------------------------------------------------------------------------------

def _per_seed(cells, base, head, fn):
    by_seed = cells.get(head_cell(base, head)) or {}
    return {k: fn(m) for k, m in by_seed.items()}


def _suite_mean(m, suites, cond):
    return _mean(m.get(f"suite/{s}/{cond}") for s in suites) if all(m.get(f"suite/{s}/{cond}") is not None
                                                                      for s in suites) else None


def decide(cells: dict, base: str, row: tuple, g: dict) -> dict:
    rid, _, (a, b), kind, _ = row
    gate = "gain_relation" if rid == "FR1" else "gain_binding" if kind == "gain" else "prior"
    reason = _gate_reason(g, gate)
    if reason:
        # A gate that has not been measured yet is missing data, not a measured reason the claim cannot be tested.
        return {"verdict": "missing" if reason in _NOT_YET else "untestable", "why": reason}
    suites = g["prior_suites"]
    if kind == "gain":
        key = "suite/relation/real" if rid == "FR1" else "binding_real"
        fa, fb = (_per_seed(cells, base, h, lambda m: m.get(key)) for h in (a, b))
    elif kind == "kept":
        fa, fb = (_per_seed(cells, base, h, lambda m: _suite_mean(m, suites, "real")) for h in (a, b))
    else:
        cond = kind.split(":")[1]
        fa, fb = (_per_seed(cells, base, h, lambda m: _suite_mean(m, suites, cond)) for h in (a, b))
        chance = _per_seed(cells, base, a, lambda m: _suite_mean(m, suites, "chance"))
    seeds = sorted(set(fa) & set(fb) & set(HEAD_SEEDS))
    if not seeds:
        return {"verdict": "missing", "why": "heads not run yet: " + ", ".join(
            head_cell(base, h) for h, f in ((a, fa), (b, fb)) if not f)}
    va, vb = [fa[k] for k in seeds], [fb[k] for k in seeds]
    out = {"seeds": seeds, "means": [_mean(va), _mean(vb)]}
    if kind.startswith("removed"):
        d = [None if x is None or y is None or chance[k] is None else (x - y) - REMOVED_SHARE * (x - chance[k])
             for k, x, y in zip(seeds, va, vb)]
        test = stats.one_sample_test(d)
        verdict = stats.verdict(test, "increase")
        out["excess_hnb"] = _mean(x - chance[k] for k, x in zip(seeds, va) if x is not None and chance[k] is not None)
        # The direction beside the criterion: how CIMR moved the condition's accuracy (a d̄ < 0 alone cannot tell
        # "removed less than half" from "raised it").
        moved = stats.paired_test(va, vb)
        out["moved"] = {"a": _mean(va), "b": _mean(vb), "delta": _mean(y - x for x, y in zip(va, vb)
                                                                        if x is not None and y is not None),
                        "p": None if moved is None else moved.p}
        out["why"] = (f"{cond.capitalize()} accuracy {_f(out['moved']['a'], '{:.1f}')} → "
                      f"{_f(out['moved']['b'], '{:.1f}')} (CIMR − HNB {_f(out['moved']['delta'], '{:+.2f}')}"
                      + (f", paired p = {moved.p:.3g}" if moved is not None else "")
                      + f"); HNB's excess over chance {_f(out['excess_hnb'], '{:+.1f}')}")
    else:
        test = stats.paired_test(va, vb)
        verdict = stats.verdict(test, "equal" if kind == "kept" else "increase",
                                margin=EQUIV_MARGIN if kind == "kept" else None)
        if kind == "gain" and verdict == "reproduced" and test.delta < GAIN:
            verdict, out["why"] = "not reproduced", f"a real gain, below the declared +{GAIN:g}"
    out["verdict"] = verdict
    if len(seeds) < len(HEAD_SEEDS) and verdict != "inconclusive":
        # One look, at the declared seeds 0–4 (protocol change list, 2026-12-05): a verdict on fewer pairs would be
        # an extra, unplanned look. The statistics show; the verdict waits.
        out.update(verdict="inconclusive", interim_verdict=verdict)
        note = (f"interim, {len(seeds)} of {len(HEAD_SEEDS)} pairs: the test says {verdict}; the one look waits "
                f"for seeds {HEAD_SEEDS[0]}–{HEAD_SEEDS[-1]}")
        out["why"] = f"{note}; {out['why']}" if out.get("why") else note
    if test is not None:
        level = 2 * test.alpha if kind == "kept" else test.alpha
        out.update(delta=test.delta, ci=list(test.interval(level)), t=test.t, df=test.df, n=test.n[0],
                   p=stats.tost_p(test, EQUIV_MARGIN) if kind == "kept" else test.p)
    elif kind.startswith("removed"):   # one seed: Δ̄ is still the row's quantity, d̄, not the raw difference
        out["delta"] = _mean(d)
    else:
        out["delta"] = _mean(y - x for x, y in zip(va, vb) if x is not None and y is not None)
    return out


def retest_2e(cells: dict, base: str, row: tuple, g: dict) -> dict | None:
    """A gain row re-tested with its Global-M head trained 2E epochs (`grid.FCSTUDY_2E_SUFFIX` cells; protocol change
    list, 2026-12-05), paired on the seeds both ran; None when those heads have not run."""
    rid, statement, (a, b), kind, label = row
    if kind != "gain" or not cells.get(head_cell(base, a + FCSTUDY_2E_SUFFIX)):
        return None
    res = decide(cells, base, (rid, statement, (a + FCSTUDY_2E_SUFFIX, b), kind, label), g)
    return None if res["verdict"] == "missing" else res


def controls(cells: dict, base: str, suites) -> dict:
    """{head: {suite: {condition: summary}}} of the Flow-CLIP heads on the control suites, for the direction check."""
    from reproduce.metrics import summarize
    return {h: {s: {c: summarize(m.get(f"suite/{s}/{c}") for m in (cells.get(head_cell(base, h)) or {}).values())
                    for c in ("real", "shuffle", "fixed")} for s in suites}
            for h in ("flowclip_hnb", "flowclip_cimr")}


def build(budgets: dict) -> dict | None:
    """The study's results from the records by budget ({budget: [records]}); None when it has no records."""
    from reproduce.report import seed_metrics
    if not budgets.get(BUDGET) and not budgets.get("flowclip_pilot"):
        return None
    cells = seed_metrics(budgets.get(BUDGET) or [])
    out = {"pilot": pilot(budgets.get("flowclip_pilot") or []), "gates": {}, "rows": [], "controls": {},
           "head_budgets": head_budgets(budgets.get(BUDGET) or [])}
    for base in BASES:
        g = out["gates"][base] = gates(cells, base)
        for row in ROWS:
            res = decide(cells, base, row, g)
            again = retest_2e(cells, base, row, g)
            if again is not None:
                res["retest_2e"] = again
                note = (f"Global-M at 2E epochs: Δ̄ {_f(again.get('delta'), '{:+.2f}')}"
                        + (f", p = {again['p']:.3g} (n = {again['n']})" if again.get("p") is not None else "")
                        + f", {again['verdict']}")
                res["why"] = f"{res['why']}; {note}" if res.get("why") else note
            out["rows"].append({"id": row[0], "base": base, "statement": row[1], "heads": row[2],
                                "quantity": row[4], "result": res})
        out["controls"][base] = controls(cells, base, g["prior_suites"])
    return out


def _f(v, fmt="{:.2f}"):
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)
