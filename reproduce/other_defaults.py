"""The report's "Other defaults" section: claims re-checked with cells that change one reconstructed project default
(the `knobs` group of `reproduce.grid`, reproduce/README.md).

A knob cell names the claim cell it stands in for (`CellSpec.variant_of`) and the one config field it changes
(`CellSpec.knob`); it runs in the same default-budget grid with the same seeds. For each knob, every claim with a
cell that has a variant under that knob is evaluated again with the variant(s) substituted — both sides when both
have one — by the same verdict rule (`reproduce.claims.check`):

    claim a → b,  knob k:   a' = variant_k(a) or a,   b' = variant_k(b) or b,   Δ_k = mean(b') − mean(a')

So the ablation step "S_H + Div/MMD → smooth-Chamfer + GD/ISD" becomes "S_H + Div/MMD → smooth-Chamfer + GD/ISD
(hinge)": the question whether GD + ISD help at all under another reading of their unstated shape. Pure functions
of the aggregated cells.
"""

from __future__ import annotations

from reproduce.claims import CLAIMS, check, outcome_phrase, spread_text
from reproduce.grid import SPEC_BY_NAME, knob_variants


def knob_claim_rows(agg: dict) -> list[dict]:
    """Claim rows (best-on-validation parameters) with knob cells substituted, for the knob cells in `agg`."""
    rows = []
    for knob, variants in knob_variants().items():
        present = {cell: v for cell, v in variants.items() if v in agg}
        for c in CLAIMS:
            if c.a not in present and c.b not in present:
                continue
            a, b = present.get(c.a, c.a), present.get(c.b, c.b)
            v = check(agg, c, a=a, b=b)
            rows.append({"id": c.id, "knob": knob, "a": a, "b": b, "metric": c.metric, **v})
    return rows


def evidence_suffix(row: dict) -> str:
    """The sentence a claim row's evidence ends with when a knob re-checked it."""
    return outcome_phrase(f"with {row['knob']} ({row['a']} → {row['b']})", row)


def section(report: dict, ms, table) -> list[str]:
    """Markdown lines of the section; `ms(summary[, digits])` formats mean ± std, `table(header, rows)` a table."""
    L = ["## Other defaults", ""]
    agg = report["cells"]
    knob_cells = [(n, c) for n, c in agg.items() if c["group"] == "knobs"]
    if not knob_cells:
        return L + ["(no knob cells in this report: the `knobs` group of `reproduce/grid.py` runs with the "
                    "default-budget grid)", ""]
    L += ["Claim cells rerun with one reconstructed default changed (same budget, seeds and everything else; "
          "best-on-validation parameters). The papers do not state these choices; the project default is one "
          "reading, the knob another (reproduce/README.md).", ""]
    rows = []
    for name, c in knob_cells:
        spec = SPEC_BY_NAME[name]
        d = agg.get(spec.variant_of) or {"metrics": {"best": {}}, "n_seeds": 0}
        db, kb = d["metrics"]["best"], c["metrics"]["best"]
        rows.append([c["label"], f"`{spec.knob}`", f"{d['n_seeds']} / {c['n_seeds']}", ms(db.get("rsum")),
                     ms(kb.get("rsum")), ms(db.get("cv_log_image"), 3), ms(kb.get("cv_log_image"), 3),
                     ms(db.get("single_gap")), ms(kb.get("single_gap"))])
    L += table(["cell", "knob", "seeds (default / knob)", "RSUM default", "RSUM knob", "ln CV default",
                "ln CV knob", "single-element gap default", "single-element gap knob"], rows)
    knob_rows = report.get("knob_claims") or []
    if knob_rows:
        by_id = {r["id"]: r for r in report["claims"]}
        signed = lambda x: "–" if x is None else f"{x:+.2f}"  # noqa: E731
        claim_rows = []
        for r in knob_rows:
            d = by_id[r["id"]]
            claim_rows.append([f"{d['claim']}: {d['text']}", f"`{r['knob']}`", f"{d['a']} → {d['b']}",
                               f"{r['a']} → {r['b']}", signed(d["paper"]["diff"]), signed(d["ours"]["diff"]),
                               d["verdict"], signed(r["diff"]) + spread_text(r), f"**{r['verdict']}**"])
        L += ["Claims re-checked with the knob cells substituted (same verdict rule):", ""]
        L += table(["claim", "knob", "default cells", "knob cells", "paper Δ", "ours Δ default", "verdict default",
                    "ours Δ knob", "verdict knob"], claim_rows)
    return L
