"""The report's "Longer budget" section: cells rerun at the `long` budget (`LONG_FACTOR` × the training length)
beside their default-budget numbers, and the claims whose two cells both ran there.

A long-budget grid lives in its own output directory (a directory holds one budget, `runner.check_budget`):

    python -m reproduce --budget long --seeds 2 --cells sh_divmmd,sc_full,sh_full --out workdir/repro_long
    python -m reproduce --budget default --seeds 3 --out workdir/repro --long-out workdir/repro_long

The second command's report then carries this section, and every claim row whose cells both ran at the long budget
gets that budget's Δ (and verdict, by the same rule) at the end of its evidence. Pure functions of the cell records
apart from `load_records`.
"""

from __future__ import annotations

import json
import os

from reproduce.claims import CLAIMS, check, outcome_phrase
from reproduce.runner import RESUMED_NOTE

LONG_BUDGET = "long"


def load_records(out: str) -> list[dict]:
    """Every finished cell record (`cells/<name>/seed<k>/cell.json`) of the long-budget grid in `out`.

    Raises ValueError when `out` holds no grid or a grid of another budget (naming `out/grid.json`)."""
    from reproduce.grid import SPECS
    path = os.path.join(out, "grid.json")
    if not os.path.exists(path):
        raise ValueError(f"--long-out {out}: no {path} (run `python -m reproduce --budget long --out {out} "
                         "--cells ...` first)")
    with open(path) as f:
        held = json.load(f)
    if held.get("budget") != LONG_BUDGET:
        raise ValueError(f"--long-out {out}: {path} holds a {held.get('budget')!r} budget grid, not {LONG_BUDGET!r}")
    from reproduce.runner import read_record
    records = []
    for spec in SPECS:
        for seed in range(int(held.get("seeds", 0))):
            record = read_record(os.path.join(out, "cells", spec.name, f"seed{seed}"))
            if record is not None:
                records.append(record)
    return records


def regenerate_commands(records: list[dict], out: str) -> list[str]:
    """The commands that rerun the long grid in `out`: one per group of cells sharing their seeds and CLIP source
    (e.g. retrieval cells on seed 0, heads on seed 2 of the default grid's CLIP)."""
    from reproduce.grid import SPECS
    seeds: dict[str, set] = {}
    clip: dict[str, str] = {}
    for r in records:
        seeds.setdefault(r["name"], set()).add(r["seed"])
        clip[r["name"]] = r.get("clip_from") or ""
    groups: dict[tuple, list[str]] = {}
    for spec in SPECS:  # grid order within a command
        if spec.name in seeds:
            groups.setdefault((tuple(sorted(seeds[spec.name])), clip[spec.name]), []).append(spec.name)
    commands = []
    for (ss, clip_from), names in groups.items():
        first = f" --first-seed {ss[0]}" if ss[0] else ""
        commands.append(f"python -m reproduce --budget long --seeds {ss[-1] - ss[0] + 1}{first} --cells "
                        f"{','.join(names)} --out {out}" + (f" --clip-from {clip_from}" if clip_from else ""))
    return commands


def _length(detail: dict) -> str:
    return f"{detail['num_steps']} steps" if detail["num_steps"] else f"{detail['num_epochs']} epochs"


def long_claim_rows(long_agg: dict) -> list[dict]:
    """Claim rows (best-on-validation parameters) of the claims whose two cells both ran at the long budget."""
    rows = []
    for c in CLAIMS:
        if c.a not in long_agg or c.b not in long_agg:
            continue
        v = check(long_agg, c)
        rows.append({"id": c.id, "a": c.a, "b": c.b, "metric": c.metric, "length": _length(
            long_agg[c.a]["budget_detail"]), **v})
    return rows


def long_knob_rows(long_agg: dict) -> list[dict]:
    """Knob re-checks (`reproduce.other_defaults`) whose two cells both ran at the long budget: whether another
    reading of an unstated default changes the verdict once the budget is no longer the limit."""
    from reproduce.other_defaults import knob_claim_rows
    return [{**r, "length": _length(long_agg[r["b"]]["budget_detail"])} for r in knob_claim_rows(long_agg)
            if r["a"] in long_agg and r["b"] in long_agg]


def evidence_suffix(row: dict) -> str:
    """The sentence a default-budget claim row's evidence ends with when its cells (or, for a knob row, the knob's
    cells) also ran at the long budget."""
    knob = f" with {row['knob']} ({row['a']} → {row['b']})" if row.get("knob") else ""
    return outcome_phrase(f"long budget ({row['length']}){knob}", row)


def section(report: dict, ms, table) -> list[str]:
    """Markdown lines of the section; `ms(summary)` formats mean ± std, `table(header, rows)` renders a table."""
    L = ["## Longer budget", ""]
    long = report.get("long")
    if not long or not long["cells"]:
        return L + ["(no long-budget cells in this report: run `python -m reproduce --budget long --cells "
                    "<names> --out DIR` and pass `--long-out DIR` — see `reproduce/longer_budget.py`)", ""]
    L += [f"Cells rerun at the long budget ({long['factor']}× the default training length, otherwise the same "
          f"config, validation every epoch, best-on-validation parameters): `{long['out']}`. Regenerate: "
          + ", then ".join(f"`{c}`" for c in long['command'].split("; ")) + ".", ""]
    default = report["cells"]
    empty = {"metrics": {"best": {}}, "n_seeds": 0, "budget_detail": None, "curve_end": {}}

    def lengths(d, c):
        return [(_length(d["budget_detail"]) if d["budget_detail"] else "–") + f" ({d['n_seeds']})",
                f"{_length(c['budget_detail'])} ({c['n_seeds']})"]

    def local_size(cell):  # Global-M logs |s_L| = 0 because it has no local branch: say so, not "0.000"
        s = (cell.get("curve_end") or {}).get("mean_abs_s_local")
        return "none" if s and s.get("mean") == 0 else ms(s, 3)

    def wall(cell):  # a resumed run timed only the steps after its checkpoint (runner note): say so beside the time
        resumed = any(n.startswith(RESUMED_NOTE) for n in cell.get("notes", []))
        return ms(cell["wall_s"], 0) + (" (resumed)" if resumed else "")

    rows, head_rows = [], []
    for name, c in long["cells"].items():
        d = default.get(name) or empty
        db, lb, lf = d["metrics"]["best"], c["metrics"]["best"], c["metrics"]["final"]
        if c["group"] == "flowclip":  # heads: the suite numbers their claims compare, and the local branch's size
            head_rows.append([c["label"], *lengths(d, c), ms(db.get("binding_real"), 1), ms(lb.get("binding_real"), 1),
                              " / ".join(ms(lb.get(f"aro_{k}"), 1) for k in ("real", "shuffle", "fixed")),
                              local_size(d), local_size(c), ms(lb.get("rsum")),
                              wall(c)])
            continue
        rows.append([c["label"], *lengths(d, c), ms(db.get("rsum")), ms(lb.get("rsum")),
                     ms(lf.get("rsum")), ms(db.get("cv_log_image"), 3), ms(lb.get("cv_log_image"), 3),
                     ms(c["stability"]["best_val_rsum"]), wall(c)])
    if rows:
        L += table(["cell", "default (seeds)", "long (seeds)", "RSUM default", "RSUM long (best)", "RSUM long (final)",
                    "ln CV default", "ln CV long", "best val RSUM (long)", "wall s / seed (long)"], rows)
    if head_rows:
        L += ["mean |s_L|: the ICER local branch's score at the last logged step (seeds with curves); 'none' for the "
              "Global-M heads, which have no local branch. A wall time marked (resumed) is that of a run interrupted "
              "and resumed from its last checkpoint: it covers only the steps after the checkpoint.", ""]
        L += table(["head", "default (seeds)", "long (seeds)", "binding Real default", "binding Real long",
                    "ARO Real / Shuffle / Fixed long", "mean |s_L| default", "mean |s_L| long", "RSUM long",
                    "wall s / seed (long)"], head_rows)
    if long["claims"]:
        by_id = {r["id"]: r for r in report["claims"]}
        signed = lambda x: "–" if x is None else f"{x:+.2f}"  # noqa: E731
        claim_rows = []
        for r in long["claims"]:
            d = by_id[r["id"]]
            claim_rows.append([f"{d['claim']}: {d['text']}", f"{r['a']} → {r['b']}", signed(d["paper"]["diff"]),
                               signed(d["ours"]["diff"]), d["verdict"], signed(r["diff"]), f"**{r['verdict']}**"])
        L += ["Claims whose two cells both ran at the long budget (same verdict rule):", ""]
        L += table(["claim", "a → b", "paper Δ", "ours Δ default", "verdict default", "ours Δ long",
                    "verdict long"],
                   claim_rows)
    if long.get("knob_claims"):
        by_id = {r["id"]: r for r in report["claims"]}
        signed = lambda x: "–" if x is None else f"{x:+.2f}"  # noqa: E731
        default_knob = {(r["id"], r["knob"]): r for r in report.get("knob_claims") or ()}
        rows = []
        for r in long["knob_claims"]:
            d, dk = by_id[r["id"]], default_knob.get((r["id"], r["knob"])) or {}
            rows.append([f"{d['claim']}: {d['text']}", f"`{r['knob']}`", f"{r['a']} → {r['b']}",
                         signed(d["paper"]["diff"]), signed(dk.get("diff")), dk.get("verdict", "–"),
                         signed(r["diff"]), f"**{r['verdict']}**"])
        L += ["Claims re-checked with a knob cell at the long budget (Other defaults, same verdict rule):", ""]
        L += table(["claim", "knob", "long cells", "paper Δ", "ours Δ knob, default budget", "verdict",
                    "ours Δ knob, long", "verdict long"], rows)
    return L
