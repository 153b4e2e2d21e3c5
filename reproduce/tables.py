"""The report's tables below the headline claims: per-cell aggregates, the common-score sensitivity, the knobs, the
budget check and the quick (2-epoch) grid (`reproduce.report` assembles them). Pure functions of the records.
"""

from __future__ import annotations

import itertools

from reproduce import power, provenance, stats
from reproduce.curves import END_KEYS, PLATEAU_WITHIN, largest_val_drop, last_value, plateau_step
from reproduce.grid import COMMON_SCORES, SPEC_BY_NAME, SPECS
from reproduce.metrics import CONDITIONS, summarize
from reproduce.runner import CODE_MOVED_NOTE

SCORE_LABELS = {"maxmatch": "exact S_H", "maxmatch_topk": "top-k (k = 4)", "smooth_chamfer": "smooth-Chamfer",
                "mil": "MIL", "average": "cosine (K = 1)"}


def score_label(kind: str) -> str:
    return SCORE_LABELS.get(kind, kind)


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")  # a bare | would end the table cell


def markdown_table(header, rows) -> list[str]:
    return ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(x) for x in r) + " |" for r in rows), ""]


def ms(s: dict | None, digits: int = 2, of: int | None = None) -> str:
    """mean ± std (mean alone for one value); "(n = k)" when only k of the cell's `of` seeds have the value."""
    if not s or s.get("mean") is None:
        return "–"
    text = f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}" if s["n"] > 1 else f"{s['mean']:.{digits}f}"
    return text + (f" (n = {s['n']})" if of is not None and s["n"] < of else "")


def _seed_notes(rs: list[dict]) -> list[str]:
    """The cell's record notes, each once, with "(k of n seeds)" when not every seed has it. The code-moved note is
    left to the report's Code line (`provenance`)."""
    counts: dict[str, int] = {}
    for r in rs:
        for note in dict.fromkeys(r.get("notes", [])):
            if not note.startswith(CODE_MOVED_NOTE):
                counts[note] = counts.get(note, 0) + 1
    return [n if k == len(rs) else f"{n} ({k} of {len(rs)} seeds)" for n, k in sorted(counts.items())]


def aggregate(records: list[dict]) -> dict:
    """{cell name: {label, group, seeds, n_seeds, budget_detail, wall_s, stability, metrics: {best|final: {metric:
    summarize(...)}}, arrays, curves, ...}} of one budget's records, in grid order."""
    out = {}
    for spec in SPECS:
        rs = sorted((r for r in records if r["name"] == spec.name), key=lambda r: r["seed"])
        if not rs:
            continue
        metrics = {}
        for which in ("best", "final"):
            keys = sorted({k for r in rs for k in r["metrics"][which]})
            metrics[which] = {k: {**summarize([r["metrics"][which].get(k) for r in rs]),
                                  "by_seed": [r["metrics"][which].get(k) for r in rs]} for k in keys}
        out[spec.name] = {
            "label": spec.label, "group": spec.group, "seeds": [r["seed"] for r in rs], "n_seeds": len(rs),
            "budget_detail": rs[0]["budget_detail"], "best_params": all(r["best_params"] for r in rs),
            "wall_s": summarize([r["wall_s"]["total"] for r in rs]),
            "load_end": summarize([(r.get("load_avg_end") or [None])[0] for r in rs]),
            "stability": {"nonfinite_losses": sum(r["stability"]["nonfinite_losses"] for r in rs),
                          "best_val_rsum": summarize([r["stability"]["best_val_rsum"] for r in rs])},
            "notes": _seed_notes(rs), "commits": provenance.commits_of(rs), "metrics": metrics,
            "matrix": ((rs[0].get("arrays") or {}).get("best") or {}).get("element_similarity"),
            "curves": [r.get("curves") or {} for r in rs],
            "val_drop": summarize([largest_val_drop(r.get("curves") or {}) for r in rs]),
            "curve_end": {k: summarize([last_value(r.get("curves") or {}, k) for r in rs]) for k in END_KEYS},
        }
    return out


def _own(name: str) -> str:
    return SPEC_BY_NAME[name].similarity


def sensitivity_section(report: dict, table) -> list[str]:
    agg = report["aggregates"].get("converged") or {}
    cells = [(n, c) for n, c in agg.items() if SPEC_BY_NAME[n].similarity]
    L = ["## Every cell under every score (converged budget)", ""]
    if not cells:
        return L + ["(no converged records yet)", ""]
    L += ["Test RSUM, mean ± std over the seeds run, best-on-validation parameters; each cell's own inference score "
          "first (the declared one), then the common scores applied to the same embeddings. Semantic ground truth, "
          "then source ground truth.", ""]
    head = ["cell", "seeds", "own (inference)", *(score_label(s) for s in COMMON_SCORES)]
    for protocol, key in (("semantic", "semantic/"), ("source", "")):
        rows = []
        for n, c in cells:
            m = c["metrics"]["best"]
            own = "rsum_sem" if protocol == "semantic" else "rsum"
            rows.append([c["label"], c["n_seeds"], ms(m.get(own)),
                         *(ms(m.get(f"retrieval/{s}/{key}rsum")) for s in COMMON_SCORES)])
        L += [f"**{protocol.capitalize()} ground truth**", ""] + table(head, rows)
    return L


def knob_section(report: dict, table) -> list[str]:
    L = ["## Readings of unstated defaults (knob cells)", ""]
    rows = []
    for budget in ("converged", "default"):
        agg = report["aggregates"].get(budget) or {}
        for n, c in agg.items():
            spec = SPEC_BY_NAME[n]
            if not spec.variant_of:
                continue
            base = agg.get(spec.variant_of) or {"metrics": {"best": {}}, "n_seeds": 0}
            key = "rsum_sem" if budget == "converged" else "rsum"
            rows.append([budget, c["label"], f"`{spec.knob}`", f"{base['n_seeds']} / {c['n_seeds']}",
                         ms(base["metrics"]["best"].get(key)), ms(c["metrics"]["best"].get(key)),
                         ms(base["metrics"]["best"].get("cv_log_image"), 3), ms(c["metrics"]["best"].get("cv_log_image"), 3)])
    if not rows:
        return L + ["(no knob cells yet)", ""]
    L += ["Each knob cell changes one reading of what the source leaves unstated (docs/reproduction/protocol.md), "
          "everything else as its claim cell; every claim row with such a cell is re-tested with it ('why' column "
          "above). RSUM: semantic at the converged budget, source at the 2-epoch one.", ""]
    L += table(["budget", "knob cell", "change", "seeds (claim cell / knob)", "RSUM claim cell", "RSUM knob",
                "ln CV claim cell", "ln CV knob"], rows)
    return L + _knob_verdicts(report, table)


def _knob_verdicts(report: dict, table) -> list[str]:
    """Per knob, the headline rows re-tested with it: the headline verdict beside the knob's (the question each
    knob asks in the protocol: does a row depend on the reading?). A knob verdict that differs and is not
    'inconclusive' is a row that depends on the reading."""
    by_knob: dict = {}
    for r in (report.get("rows") or {}).get("headline") or ():
        for k in r.get("knobs") or ():
            by_knob.setdefault(k["knob"], []).append((r["id"], r["result"]["verdict"], k["verdict"]))
    if not by_knob:
        return []
    undecided = ("inconclusive", "missing")
    rows = []
    for knob, got in by_knob.items():
        moved = ", ".join(i for i, v, kv in got if kv != v and kv not in undecided)
        pending = any(kv in undecided for *_, kv in got)
        rows.append([f"`{knob}`", "; ".join(f"{i}: {v} → {kv}" for i, v, kv in got),
                     moved or ("none yet (some re-tests inconclusive: too few knob seeds)" if pending else "none")])
    return ["Headline rows under each knob (converged budget): the row's verdict → its verdict with the knob's cells "
            "swapped in, same rule and looks.", ""] + table(["knob", "rows: headline → with the knob",
                                                               "rows whose verdict the knob changes"], rows)


def budget_check_section(report: dict, table) -> list[str]:
    """The converged recipe at 10 against 20 epochs, same cell and seed: test RSUM, the epoch from which validation
    stays within `PLATEAU_WITHIN` of its best, and, for two cells of the check on one seed, their Δ at each budget
    (whether the longer budget moves a comparison, not only both cells)."""
    conv, x2 = report["cells"].get("converged") or {}, report["cells"].get("converged_x2") or {}
    runs = {(r["budget"], r["name"], r["seed"]): r for r in report.get("records") or ()}
    L = ["## Budget check: 10 against 20 epochs", ""]
    rows = []
    for n, by_seed in x2.items():
        for seed, m in sorted(by_seed.items()):
            ten = (conv.get(n) or {}).get(seed) or {}
            flat = [_plateau_epoch(runs.get((b, n, seed))) for b in ("converged", "converged_x2")]
            rows.append([SPEC_BY_NAME[n].label, seed, _num(ten.get("rsum_sem")), _num(m.get("rsum_sem")),
                         _num(ten.get("rsum")), _num(m.get("rsum")), " / ".join(flat)])
    if not rows:
        return L + ["(the 20-epoch runs have not finished)", ""]
    L += ["Same cell and seed, the converged recipe at 10 and at 20 epochs (test RSUM, best-on-validation "
          "parameters; the schedule anneals to 0 at each budget's end). 'Levels off' is the epoch from which "
          f"validation RSUM stays within {PLATEAU_WITHIN:g} of its best. The claim rows' 'why' gives the verdicts "
          "these cells' comparisons reach at 20 epochs.", ""]
    L += table(["cell", "seed", "10 ep, semantic", "20 ep, semantic", "10 ep, source", "20 ep, source",
                "levels off at epoch (10 ep / 20 ep)"], rows)
    pairs = []
    for a, b in itertools.combinations([s.name for s in SPECS if s.name in x2], 2):
        band = stats.one_seed_move_band(*[[m.get("rsum_sem") for m in (conv.get(c) or {}).values()] for c in (a, b)])
        for seed in sorted(set(x2[a]) & set(x2[b]) & set(conv.get(a) or {}) & set(conv.get(b) or {})):
            vals = [(at[a][seed].get("rsum_sem"), at[b][seed].get("rsum_sem")) for at in (conv, x2)]
            if all(None not in v for v in vals):
                (a10, b10), (a20, b20) = vals
                move = (b20 - a20) - (b10 - a10)
                pairs.append(f"{b} − {a}, seed {seed}: Δ {b10 - a10:+.2f} at 10 epochs, {b20 - a20:+.2f} at 20 "
                             "(semantic RSUM), a move of " + (f"{move:+.2f}" if band is None else
                             f"{move:+.2f} against ±{band[0]:.2f} (ν = {band[1]:.0f}), "
                             f"**{'beyond' if abs(move) > band[0] else 'within'}** the band"))
    if not pairs:
        return L
    return L + ["Between the check's cells: " + "; ".join(pairs) + ". The band is where a one-seed Δ's move between "
                "budgets falls 95 % of the time under seed noise alone (± t·2·s_p, s_p the two cells' pooled seed SD "
                "at 10 epochs; `reproduce.stats.one_seed_move_band`). Declared before the second check run's test "
                "result (docs/reproduction/protocol.md, stop 43): a move beyond the band says the 10-epoch budget "
                "can change this comparison, and the headline rows are read with that caveat; within it, the check "
                "sees no move larger than one seed's noise, which a smaller real move could hide in.", ""]


def _plateau_epoch(record: dict | None) -> str:
    """The epoch (`plateau_step` × epochs / steps) from which the run's validation stays near its best; '–' when
    the record or its curves are missing."""
    if not record:
        return "–"
    step = plateau_step(record.get("curves") or {})
    epochs = (record.get("budget_detail") or {}).get("num_epochs")
    steps = (record.get("steps") or {}).get("final")
    return "–" if step is None or not epochs or not steps else f"{step * epochs / steps:.1f}"


def _num(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def quick_section(report: dict, table, claim_table) -> list[str]:
    """The 2-epoch grid (and its 10-epoch `long` cells): the claims re-tested at one look, and its tables."""
    agg = report["aggregates"].get("default") or {}
    L = ["## The quick budget (2 epochs)", ""]
    if not agg:
        return L + ["(no quick-budget records)", ""]
    L += ["The grid first run for this study: every config's default 2-epoch budget (Flow-CLIP heads: 300 steps of 64 "
          "on a 4-epoch CLIP), 3 seeds, validation once per epoch on the training similarity's source RSUM. Its "
          "records have the source ground truth only; one look at α = 0.05. Too short for the MaxMatch claims (the "
          "converged budget decides them); it is the only budget of the Flow-CLIP rows, which the next study "
          "rebuilds on a testbed able to show them.", ""]
    rows = report["quick"]["maxmatch"]
    L += ["**MaxMatch and derived rows, 2 epochs (source ground truth)**", ""] + claim_table(rows, table)
    flow = report["quick"]["flowclip"]
    L += ["**Flow-CLIP rows (paired by seed: both heads of seed k sit on seed k's frozen CLIP)**", ""]
    L += claim_table(flow, table)
    L += ["Quotes:", ""] + [f"- **{r['claim'].id}** ({r['claim'].ref}): “{r['claim'].quote}”" for r in flow] + [""]
    L += _grid_table(agg, table) + _retrieval_tables(agg, table) + _set_tables(agg, report, table)
    L += _flowclip_tables(agg, table)
    return L


def _grid_table(agg, table) -> list[str]:
    L = ["**Grid and budget (2 epochs)**. 'largest val drop': the largest fall of validation RSUM below its best so far "
         "(0 = never falls; a collapse would show here).", ""]
    return L + table(["cell", "group", "seeds", "steps / epochs", "batch", "validation", "wall s / seed",
                      "non-finite losses", "best val RSUM", "largest val drop", "notes"],
                     [[c["label"], c["group"], c["n_seeds"], c["budget_detail"]["num_steps"] or
                       f"{c['budget_detail']['num_epochs']} ep", c["budget_detail"]["batch_size"],
                       c["budget_detail"]["validation"], ms(c["wall_s"], 0), c["stability"]["nonfinite_losses"],
                       ms(c["stability"]["best_val_rsum"]), ms(c.get("val_drop"), of=c["n_seeds"]),
                       "; ".join(c["notes"])] for c in agg.values()])


def _retrieval_tables(agg, table) -> list[str]:
    head = ["cell", "seeds", "RSUM (best)", "RSUM (final)", "S_H exact RSUM", "top-k RSUM", "I2T R@1", "T2I R@1"]
    rows = []
    for name, c in agg.items():
        if c["group"] not in ("ablation", "baselines", "knobs"):
            continue
        b, f, own = c["metrics"]["best"], c["metrics"]["final"], _own(name)
        rows.append([c["label"], c["n_seeds"], ms(b.get("rsum")), ms(f.get("rsum")),
                     ms(b.get("retrieval/maxmatch/rsum")), ms(b.get("retrieval/maxmatch_topk/rsum")),
                     ms(b.get(f"retrieval/{own}/i2t_r1")), ms(b.get(f"retrieval/{own}/t2i_r1"))])
    return ["**Retrieval (2 epochs, source ground truth)**: RSUM = each cell's inference score.", ""] + table(head, rows)


def _set_tables(agg, report, table) -> list[str]:
    set_cells = [(n, c) for n, c in agg.items() if "single/full" in c["metrics"]["best"]]
    k = max((sum(m.startswith("single/element") for m in c["metrics"]["best"]) for _, c in set_cells), default=0)
    L = ["**Single-element retrieval (2 epochs)**: RSUM with each image element alone; gap = full − weakest.", ""]
    L += table(["cell", "full set", *[f"element {i}" for i in range(k)], "gap"],
               [[c["label"], ms(c["metrics"]["best"]["single/full"]),
                 *[ms(c["metrics"]["best"].get(f"single/element{i}")) for i in range(k)],
                 ms(c["metrics"]["best"].get("single_gap"))] for _, c in set_cells])
    cv_keys = [f"cv/{s}/{v}/mean_log_cv" for s in ("image", "text") for v in ("set", "residual")]
    L += ["**Circular variance (2 epochs)**: mean ln CV (more negative = more collapsed).", ""]
    L += table(["cell", "image elements", "image residuals", "text elements", "text residuals"],
               [[c["label"], *[ms(c["metrics"]["best"].get(key), 3) for key in cv_keys]] for _, c in set_cells])
    maps = report.get("heatmaps") or {}
    L += ["**Element-similarity heat maps (2 epochs, seed 0)**: mean cosine of image element i and caption element j "
          "over matching test pairs.", ""]
    L += [f"- {agg[n]['label']}: ![{agg[n]['label']}]({p})" for n, p in maps.items()] or ["(none)"]
    return L + [""]


def _flowclip_tables(agg: dict, table) -> list[str]:
    cells = [c for c in agg.values() if c["group"] == "flowclip"]
    if not cells:
        return []
    tasks = sorted({k.split("/")[1] for c in cells for k in c["metrics"]["best"] if k.startswith("suite/")})

    def cell_text(c, prefix):
        vals = [(c["metrics"]["best"].get(f"{prefix}{cond}") or {}).get("mean") for cond in CONDITIONS]
        return " / ".join("–" if v is None else f"{v:.1f}" for v in vals)

    chance = lambda key: _num((cells[0]["metrics"]["best"].get(key) or {}).get("mean"), 0)  # noqa: E731
    rows = [[t, *[cell_text(c, f"suite/{t}/") for c in cells], chance(f"suite/{t}/chance")] for t in tasks]
    rows += [[f"**{g} mean**", *[cell_text(c, f"{g}_") for c in cells], chance(f"{g}_chance")]
             for g in ("binding", "aro")]
    return ["**Flow-CLIP grid (2 epochs)**: suite accuracy (%) with Real / Shuffle / Fixed images, mean over seeds.",
            ""] + table(["suite", *[c["label"] for c in cells], "chance"], rows)


def _vs_interval(x: float | None, ci) -> str:
    if x is None or ci is None:
        return "–"
    return "inside" if ci[0] <= x <= ci[1] else "above" if x > ci[1] else "below"


def power_section(rows: list[dict], table, *, seeds_planned: int = 5) -> list[str]:
    """What each headline and derived test could detect (`reproduce.power`): the minimum detectable effect at 80 %
    power at the observed spread, projected to `seeds_planned` seeds where the row is still at fewer, and where the
    source's own Δ falls against our interval."""
    body = []
    # Each row, then its knob re-tests (same claim, a knob cell swapped in): where the declared cells cannot be
    # tested (a collapsed baseline), a re-test is the one reading left, and whether it could see the source's Δ
    # matters as much.
    tests = []
    for r in rows:
        tests.append((r["claim"], r["claim"].id, r["result"]))
        tests += [(r["claim"], f"{r['claim'].id}, `{k['knob']}`", k) for k in r.get("knobs") or ()
                  if k.get("verdict") != "missing"]
    for c, rid, res in tests:
        n = res.get("n") or []
        n_text = "/".join(str(x) for x in n) or "–"
        se, df, alpha = res.get("se"), res.get("df"), res.get("alpha")
        if c.direction == "equal" or se is None:
            now = later = "–"
        else:
            now = _num(power.mde(se, df, alpha))
            equal_n = len(set(n)) == 1 and n[0] >= 2
            later = (_num(power.mde(*power.at_seeds(se, df, n[0], seeds_planned), alpha))
                     if equal_n and n[0] < seeds_planned else "–")
        body.append([rid, f"**{res['verdict']}**", n_text, _num(se), _num(df, 1), now, later,
                     "–" if c.source_delta is None else f"{c.source_delta:+g}",
                     "–" if c.direction == "equal" else _vs_interval(c.source_delta, res.get("ci"))])
    return ["## What the tests could detect", "",
            "For each row with a test: its standard error and degrees of freedom at the seeds it used, the smallest "
            f"effect it detects with {power.POWER * 100:.0f} % power at its own level α (the minimum detectable "
            f"effect, MDE, at the spread the seeds showed; `reproduce/power.py`), the same projected to {seeds_planned} "
            "seeds per cell, and where the source's Δ falls against our interval. A 'not reproduced' row with an "
            "MDE well above the source's Δ is a test that could not have seen an effect of the source's size; the "
            "source's Δ is measured on its own benchmark (Flickr30k RSUM, or the secondary source's circular "
            "variance), so it places the scale, not a value ShapesWorld must give. The equivalence row (S2) is "
            "decided by its margin instead; M3 shows its weakest comparison. A row's knob re-tests follow it, "
            "named by the knob.", ""] + table(
        ["id", "verdict", "seeds", "SE", "ν", f"MDE ({power.POWER * 100:.0f} % power)",
         f"MDE at {seeds_planned} seeds", "source Δ", "source Δ vs our CI"], body)
