"""The reproduction report: `reproduction.md`, `reproduction.json` (every number) and `figures/*.png`, built from cell
records of every budget (the committed archive, plus a grid directory's own) — docs/reproduction/protocol.md says
what is tested and how.

    MaxMatch claims (headline)   the 'maxmatch' claims at the converged budget: semantic RSUM of each cell's
                                 inference score, two looks at Pocock's level; beside each, the source-ground-truth
                                 verdict, the common scores that would change it, and the other budgets' and knobs'
    derived rows                 the same tests on the comparisons the source does not make
    common-score sensitivity     every converged cell under every score
    knobs, budget check          readings of unstated defaults; 10 against 20 epochs
    quick budget                 the 2-epoch grid (and its 10-epoch `long` cells): the same rows at one look
                                 (source ground truth, the only one its records have), the Flow-CLIP rows, and the
                                 grid's tables (`reproduce.tables`)

Pure functions of the records apart from `write_report` and `publish`.
"""

from __future__ import annotations

import json
import os
import shutil

from reproduce import claims as C
from reproduce import figures, flowclip_oracle, flowclip_report, flowclip_study, provenance, replay, stats, tables
from reproduce.curves import COLLAPSE_DROP, collapse
from reproduce.grid import COMMON_SCORES, RECIPE_KNOBS, knob_variants
from reproduce.tables import score_label

HEADLINE, CHECK, QUICK, LONG = "converged", "converged_x2", "default", "long"
BUDGET_ORDER = ("converged", "converged_x2", "flowclip", "flowclip_pilot", "default", "long", "smoke")


# ---- records --------------------------------------------------------------------------------------------------

def by_budget(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["budget"], []).append(r)
    return {b: out[b] for b in BUDGET_ORDER if b in out} | {b: v for b, v in out.items() if b not in BUDGET_ORDER}


def seed_metrics(records: list[dict]) -> dict:
    """{cell: {seed: best-parameter metrics}} of one budget's records."""
    out: dict = {}
    for r in records:
        out.setdefault(r["name"], {})[r["seed"]] = r["metrics"]["best"]
    return out


def collapsed_runs(records: list[dict]) -> dict:
    """{cell: {seed: {"best", "end"}}}: the runs of one budget that collapsed (`curves.collapse`)."""
    out: dict = {}
    for r in records:
        hit = collapse(r.get("curves") or {})
        if hit:
            out.setdefault(r["name"], {})[r["seed"]] = hit
    return out


def gate(result: dict, cells: dict, collapsed: dict | None) -> dict:
    """`result` made 'untestable' when one of its cells collapsed in at least half of the seeds it gave the test: the
    comparison would measure a collapsed run, not the method (protocol change list, 2026-12-04). The test's own
    verdict stays as `tested_verdict`, the collapsed runs as `collapsed` {cell: [[seed, best, end], ...]}."""
    if not collapsed or result["verdict"] == "missing":
        return result
    hits = {}
    for cell in dict.fromkeys(result.get("cells") or ()):
        ran = [k for k in result.get("seeds") or () if k in (cells.get(cell) or {})]
        bad = [[k, collapsed[cell][k]["best"], collapsed[cell][k]["end"]] for k in ran if k in collapsed.get(cell, {})]
        if ran and 2 * len(bad) >= len(ran):
            hits[cell] = bad
    if not hits:
        return result
    return {**result, "verdict": "untestable", "tested_verdict": result["verdict"], "collapsed": hits}


def collapse_text(hits: dict) -> str:
    """'collapsed: vse seed 0 (val RSUM 432 → 280)' for a gated result's `collapsed`."""
    return "collapsed: " + "; ".join(f"{cell} seed {k} (val RSUM {best:.0f} → {end:.0f})"
                                     for cell, runs in hits.items() for k, best, end in runs)


# ---- claim rows ------------------------------------------------------------------------------------------------

def _knob_swaps() -> list[tuple[str, dict]]:
    return list(knob_variants().items())


def knob_applies(knob: str, swap: dict, row_cells, records: dict) -> bool:
    """Whether a row is re-tested with `knob`: some of its cells have a variant, every such variant has records,
    and, for a knob that changes every cell's training (`grid.RECIPE_KNOBS`), every cell of the row has one."""
    mine = [k for k in row_cells if k in swap]
    if not mine or not all(records.get(swap[k]) for k in mine):
        return False
    return knob not in RECIPE_KNOBS or len(mine) == len(set(row_cells))


def claim_rows(cells: dict, claims, *, looks: str, protocol: str, collapsed: dict | None = None) -> list[dict]:
    """One row per claim: its declared result and, for RSUM claims, the verdict under every common score; every
    result passes the collapse `gate` (`collapsed`: `collapsed_runs` of the same budget)."""
    def decide(c, **kw):
        return gate(C.decide(c, cells, looks=looks, **{"protocol": protocol, **kw}), cells, collapsed)

    rows = []
    for c in claims:
        row = {"id": c.id, "claim": c, "result": decide(c)}
        if looks == "two":
            row["source_gt"] = decide(c, protocol="source")
        if C.QUANTITIES[c.quantity][2]:
            row["scores"] = {s: decide(c, score=s)["verdict"] for s in COMMON_SCORES}
        row["knobs"] = [{"knob": knob, "swap": {k: v for k, v in swap.items() if k in c.cells},
                         **decide(c, swap=swap)}
                        for knob, swap in _knob_swaps() if knob_applies(knob, swap, c.cells, cells)]
        rows.append(row)
    return rows


def _why(row: dict, others: dict) -> str:
    """What else bears on the row: the source-ground-truth verdict when it differs, the scores that change it, the
    knobs and the other budgets with their verdicts."""
    v = row["result"]["verdict"]
    parts = []
    if row["result"].get("collapsed"):
        parts.append(f"{collapse_text(row['result']['collapsed'])}; the test alone says "
                     f"{_delta(row['result'])} {row['result']['tested_verdict']}")
    if row["result"].get("missing"):
        what = "no value in the records of" if row["result"].get("no_value") else "cells not run yet:"
        parts.append(f"{what} " + ", ".join(row["result"]["missing"]))
    if row["result"].get("interim_verdict"):
        parts.append(f"interim, {row['result']['interim_seeds']} of {len(C.FIRST_LOOK)} seeds: the test says "
                     f"{row['result']['interim_verdict']}; the first look waits for seeds 0–2")
    if row["result"].get("first_look"):
        parts.append("undecided at 3 seeds, tested on 5")
    if row["result"].get("second_look_waits"):
        parts.append("undecided at 3 seeds: the second look (seeds 0–4) waits for "
                     + ", ".join(row["result"]["second_look_waits"]))
    src = (row.get("source_gt") or {}).get("verdict")
    if src and src != v:
        parts.append(f"source ground truth: {src}")
    flips = [score_label(s) for s, sv in (row.get("scores") or {}).items() if sv != v and sv != "missing"]
    if flips:
        parts.append("another verdict under " + ", ".join(flips))
    for k in row.get("knobs") or ():
        # A knob that leaves the collapsed cell as it was (a baseline the knob does not touch) names no runs again.
        same = k.get("collapsed") == row["result"].get("collapsed")
        gated = (f" ({'the same collapsed runs' if same else collapse_text(k['collapsed'])}; the test alone: "
                 f"{k['tested_verdict']})" if k.get("collapsed") else "")
        parts.append(f"`{k['knob']}`: {_delta(k)} {k['verdict']}{gated}")
    for budget, label in (("converged_x2", "20 epochs"), ("long", "10 epochs, quick recipe"),
                          ("default", "2 epochs")):
        o = (others.get(budget) or {}).get(row["id"])
        if o and o["result"]["verdict"] != "missing":
            gated = f" ({collapse_text(o['result']['collapsed'])})" if o["result"].get("collapsed") else ""
            parts.append(f"{label}: {_delta(o['result'])} {o['result']['verdict']}{gated}")
    return "; ".join(parts) or "–"


def _delta(r: dict) -> str:
    return "Δ –," if r.get("delta") is None else f"Δ {r['delta']:+.2f},"


def _ci(r: dict) -> str:
    if r.get("ci") is None:
        return "–"
    return f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]"


def _test_text(r: dict, claim=None) -> str:
    if r.get("parts"):  # an intersection–union row: every comparison it needs, and the union's p (the largest)
        return "; ".join(f"vs {p['vs']}: " + (f"Δ {p['delta']:+.2f}, p = {p['p']:.3g}" if p.get("p") is not None
                                               else p["verdict"]) for p in r["parts"]) + (
            f"; intersection–union p = {r['p_iut']:.3g}" if r.get("p_iut") is not None else "")
    if r.get("t") is None:
        return "–"
    n = "/".join(str(x) for x in r.get("n") or ())
    p_name = "TOST p" if claim is not None and claim.direction == "equal" else "p"
    return f"t = {r['t']:.2f}, ν = {r['df']:.1f}, {p_name} = {r['p']:.3g} (n = {n})"


# ---- the report --------------------------------------------------------------------------------------------------

def build_report(records: list[dict], *, command: str, oracle_path: str = flowclip_oracle.RECORD,
                 replay_dir: str = replay.REPLAY_DIR) -> dict:
    budgets = by_budget(records)
    cells = {b: seed_metrics(rs) for b, rs in budgets.items()}
    collapsed = {b: collapsed_runs(rs) for b, rs in budgets.items()}
    headline = [c for c in C.CLAIMS if c.table == "maxmatch"]
    derived = [c for c in C.CLAIMS if c.table == "derived"]
    flowclip = [c for c in C.CLAIMS if c.table == "flowclip"]
    gated = dict(looks="two", protocol="semantic", collapsed=collapsed.get(HEADLINE))
    rows = {"headline": claim_rows(cells.get(HEADLINE, {}), headline, **gated),
            "derived": claim_rows(cells.get(HEADLINE, {}), derived, **gated)}
    others = {}
    for budget in (CHECK, LONG, QUICK):
        if budget in cells:
            protocol = "semantic" if budget == CHECK else "source"
            others[budget] = {r["id"]: r for r in claim_rows(cells[budget], headline + derived, looks="one",
                                                                  protocol=protocol, collapsed=collapsed[budget])}
    for r in rows["headline"] + rows["derived"]:
        r["why"] = _why(r, others)
    for r in others.get(QUICK, {}).values():  # the quick rows: their knobs and the 10-epoch cells
        r["why"] = _why(r, {LONG: others.get(LONG, {})})
    quick = {"maxmatch": list(others.get(QUICK, {}).values()),
             "flowclip": claim_rows(cells.get(QUICK, {}), flowclip, looks="one", protocol="source")}
    long_flowclip = claim_rows(cells.get(LONG, {}), flowclip, looks="one", protocol="source") if LONG in cells else []
    long_by_id = {r["id"]: r for r in long_flowclip}
    for r in quick["flowclip"]:  # the quick Flow-CLIP rows: what the 1500-step heads say
        lr = long_by_id.get(r["id"])
        r["why"] = ("–" if not lr or lr["result"]["verdict"] == "missing" else
                    f"1500 steps (seeds {', '.join(map(str, lr['result']['seeds']))}): {_delta(lr['result'])} "
                    f"{lr['result']['verdict']}")
    fcstudy = flowclip_study.build(budgets)
    return {"command": command, "budgets": {b: len(rs) for b, rs in budgets.items()}, "cells": cells,
            "fcstudy": fcstudy, "flowclip_oracle": flowclip_oracle.load(oracle_path),
            "aggregates": {b: tables.aggregate(rs) for b, rs in budgets.items()}, "rows": rows, "others": others,
            "quick": quick, "long_flowclip": long_flowclip, "records": records,
            "code": {**provenance.compare(provenance.commits_of(records)),
                     "end_labelled": provenance.end_labelled(records)},
            "row_code": provenance.rows_code(_row_records(budgets, rows, fcstudy)),
            "replays": replay.load(replay_dir),
            "machines": _machines(records), "wall_s": {b: sum(r["wall_s"]["total"] for r in rs)
                                                       for b, rs in budgets.items()}}


def _row_records(budgets: dict, rows: dict, fcstudy: dict | None) -> list[tuple[str, str, list[dict]]]:
    """(row id, budget / base, the records of the cells the row compares) of the headline, derived and Flow-CLIP
    study rows, for the per-row code table."""
    def of(budget, names):
        return [r for r in budgets.get(budget, []) if r.get("name") in names]
    out = [(r["claim"].id, HEADLINE, of(HEADLINE, set(r["claim"].cells))) for r in rows["headline"] + rows["derived"]]
    for r in (fcstudy or {}).get("rows", []):
        out.append((r["id"], f"{flowclip_study.BUDGET} · base {r['base']}",
                    of(flowclip_study.BUDGET, {flowclip_study.head_cell(r["base"], h) for h in r["heads"]})))
    return out


def _machines(records) -> dict:
    out: dict = {}
    for r in records:
        key = r.get("machine") or "not recorded"
        out[key] = out.get(key, 0) + 1
    return out


def _status(report: dict) -> list[str]:
    n = report["budgets"]
    expected = {HEADLINE: 3 * len(_headline_cells()), CHECK: 2}
    parts = [f"{n.get(b, 0)} run(s) at the {b} budget" for b in BUDGET_ORDER if b in n]
    L = [f"Records: {', '.join(parts) or 'none'}. Total cell wall time: "
         + ", ".join(f"{b} {report['wall_s'][b] / 3600:.1f} h" for b in n) + "; machines: "
         + "; ".join(f"{m} ({k} run(s))" for m, k in report["machines"].items()) + ".", ""]
    done = len([1 for c in _headline_cells() for s in C.FIRST_LOOK if s in report["cells"].get(HEADLINE, {}).get(c, {})])
    if done < expected[HEADLINE]:
        L += [f"**The converged grid is still running: {done} of the {expected[HEADLINE]} runs the headline rows need "
              "at 3 seeds are finished.** Rows with a missing cell say so; the verdicts of the others are final only "
              "once every row's cells have their seeds (docs/reproduction/protocol.md).", ""]
        return L
    waiting = [r for r in report["rows"]["headline"] + report["rows"]["derived"]
               if r["result"].get("second_look_waits")]
    if waiting:
        runs = sorted({w for r in waiting for w in r["result"]["second_look_waits"]})
        L += [f"**First look done (seeds 0–2 of all {expected[HEADLINE]} headline runs); the second look waits for "
              f"{len(runs)} run(s).** {', '.join(r['claim'].id for r in waiting)} are undecided at 3 seeds and are "
              f"tested again on seeds 0–4 once these finish: {', '.join(runs)}. Their verdicts below are the first "
              "look's (docs/reproduction/protocol.md).", ""]
    return L


def _headline_cells() -> list[str]:
    return sorted({n for c in C.CLAIMS if c.table in ("maxmatch", "derived") for n in c.cells})


def _claim_table(rows: list[dict], table) -> list[str]:
    head = ["id", "the source says", "comparison", "quantity", "source", "ours Δ",
            "CI (1 − α; 1 − 2α for a margin row)", "test", "verdict", "why / what else says"]
    body = []
    for r in rows:
        c, res = r["claim"], r["result"]
        body.append([c.id, c.text, c.comparison(), C.QUANTITY_NAMES[c.quantity]
                     + (f", margin ±{c.margin:g}" if c.margin else ""),
                     c.source_value, "–" if res.get("delta") is None else f"{res['delta']:+.2f}", _ci(res),
                     _test_text(res, c), f"**{res['verdict']}**", r.get("why", "–")])
    return table(head, body)


def _counts(rows) -> str:
    counts: dict = {}
    for r in rows:
        counts[r["result"]["verdict"]] = counts.get(r["result"]["verdict"], 0) + 1
    return ", ".join(f"{k} {v}" for v, k in sorted(((v, k) for k, v in counts.items()), reverse=True)) or "none"


def render_markdown(report: dict) -> str:
    table = tables.markdown_table
    L = ["# Reproduction report", "",
         f"Regenerate: `{report['command']}` (reads every committed cell record; runs nothing).", ""]
    L += _status(report)
    code = provenance.sentence(report["code"], report["code"]["end_labelled"]) if report.get("code") else ""
    L += [code, ""] if code else []
    head = report["rows"]["headline"]
    L += ["## MaxMatch claims (converged budget)", "",
          f"Verdicts: {_counts(head)} (of {len(head)} rows, each a statement of the MaxMatch project page; quotes "
          "below). Protocol, declared before the runs: [docs/reproduction/protocol.md](reproduction/protocol.md). "
          f"Quantity per seed on the test split with the best-on-validation parameters; RSUM = semantic ground truth, "
          f"each cell's own inference score; Δ as the comparison reads; tests at α = {C.HEADLINE_ALPHA} (Pocock, two "
          "looks: seeds 0–2, then 0–4 for an undecided row); a row is **untestable** when one of its cells collapsed "
          f"(its last validation RSUM more than {COLLAPSE_DROP:.0%} below its best) in at least half of its seeds, "
          "whatever the test says; 'why' lists the collapsed runs, the source-ground-truth verdict when it "
          "differs, the common scores under which the verdict would differ, the knobs, and the other budgets.", ""]
    L += _claim_table(head, table)
    L += ["Quotes:", ""] + [f"- **{r['claim'].id}** ({r['claim'].ref}): “{r['claim'].quote}”" for r in head] + [""]
    L += ["## Derived rows (not the source's statements)", "",
          "Comparisons the page implies but does not make, or values from a secondary source; same tests, never "
          "counted above.", ""] + _claim_table(report["rows"]["derived"], table)
    L += tables.power_section(report["rows"]["headline"] + report["rows"]["derived"], table)
    L += tables.sensitivity_section(report, table)
    L += tables.knob_section(report, table)
    L += tables.budget_check_section(report, table)
    L += flowclip_report.section(report.get("fcstudy"), table)
    L += flowclip_report.oracle_section(report.get("flowclip_oracle"), table)
    L += tables.quick_section(report, table, _claim_table)
    L += provenance.rows_section(report.get("row_code", []), table,
                                 [replay.sentence(r) for r in report.get("replays", [])],
                                 replay.summary(report.get("replays", [])))
    L += ["## Figures", ""] + [f"![{n}]({p})" for n, p in report.get("figures", {}).items()] + [""]
    L += ["## Verdict rule", "", stats.__doc__.split("\n\n", 1)[1].strip(), ""]
    return "\n".join(L)


def write_report(records: list[dict], out: str, *, command: str, oracle_path: str = flowclip_oracle.RECORD,
                 replay_dir: str = replay.REPLAY_DIR) -> dict:
    """Writes reproduction.md, reproduction.json and figures/ into `out`; returns the report dict. `oracle_path`: the
    Flow-CLIP mechanism oracle's record (the committed one by default; a missing file leaves its table out)."""
    report = build_report(records, command=command, oracle_path=oracle_path, replay_dir=replay_dir)
    os.makedirs(out, exist_ok=True)
    report["figures"] = figures.write_figures(report, out)
    report["heatmaps"] = figures.draw_heatmaps(report["aggregates"].get(QUICK, {}), out)
    with open(os.path.join(out, "reproduction.json"), "w") as f:
        json.dump(_jsonable(report), f, indent=1)
    with open(os.path.join(out, "reproduction.md"), "w") as f:
        f.write(render_markdown(report))
    return report


def _jsonable(x):
    if isinstance(x, C.Claim):
        return x.id
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def publish(out: str, path: str) -> str:
    """Copies `out/reproduction.md` to `path` (e.g. docs/reproduction.md) and `out/figures/` to the directory named
    like `path` without its suffix (docs/reproduction/), with the figure links rewritten to it; returns that dir."""
    if not path.endswith(".md"):
        raise ValueError(f"--publish needs a .md path, got {path!r}")
    fig_dir = path[:-3]
    with open(os.path.join(out, "reproduction.md")) as f:
        text = f.read()
    os.makedirs(fig_dir, exist_ok=True)
    for stale in os.listdir(fig_dir):  # figures of cells no longer in the report must not linger; the archive
        if stale.endswith(".png"):     # of cell records (docs/reproduction/records) and the protocol stay
            os.remove(os.path.join(fig_dir, stale))
    shutil.copytree(os.path.join(out, "figures"), fig_dir, dirs_exist_ok=True)
    name = os.path.basename(fig_dir)
    text = text.replace("](figures/", f"]({name}/")
    with open(path, "w") as f:
        f.write(text)
    return fig_dir

