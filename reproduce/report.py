"""The reproduction report: `reproduction.md` (tables), `reproduction.json` (every number) and `figures/*.png`.

Protocol: the test split scored with the best-on-validation parameters ('best'); the final-state numbers stand
beside them. Cells are aggregated over seeds (mean ± sample std); claims follow `reproduce.claims.verdict`.
All functions take the cell records (`cell.json` contents, `reproduce.runner`) and are pure apart from
`write_report`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil

from reproduce.claims import CLAIMS, SETTINGS, VERDICT_RULE, cell_values, check, spread_name
from reproduce.figures import copy_heatmaps, write_figures
from reproduce import longer_budget, other_defaults, provenance, summary
from reproduce.summary import HEAD_NEAR_BASE, NEAR_CHANCE, short_why, suite_facts
from reproduce.grid import LONG_FACTOR, SMOKE_STEPS, SPECS
from reproduce.metrics import CONDITIONS, summarize
from reproduce.curves import END_KEYS, largest_val_drop, last_value
from reproduce.runner import CODE_MOVED_NOTE

PROTOCOL_NOTE = ("Test split (ShapesWorld `test`, retrieval protocol 'all'); **best-on-validation parameters** "
                 "(validation RSUM of the training similarity), final-state parameters beside them.")
SECTIONS = ("Summary", "Grid and budget", "MaxMatch ablation", "Baselines", "Single-element retrieval",
            "Circular variance", "Element-similarity heat maps", "Flow-CLIP grid", "Claims", "Longer budget",
            "Other defaults", "Figures", "Verdict rule")


def _seed_notes(rs: list[dict]) -> list[str]:
    """The cell's record notes, each once, with "(k of n seeds)" when not every seed has it. The code-moved note is
    left to the report's Code line (`provenance`), which says whether the commits differ in what cells compute."""
    counts: dict[str, int] = {}
    for r in rs:
        for note in dict.fromkeys(r.get("notes", [])):
            if not note.startswith(CODE_MOVED_NOTE):
                counts[note] = counts.get(note, 0) + 1
    return [n if k == len(rs) else f"{n} ({k} of {len(rs)} seeds)" for n, k in sorted(counts.items())]


def aggregate(records: list[dict]) -> dict:
    """{cell name: {label, group, seeds, n_seeds, budget_detail, wall_s, stability, metrics: {best|final: {metric:
    summarize(...)}}, figures}} in grid order."""
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
            "notes": _seed_notes(rs),
            "commits": provenance.commits_of(rs),
            "metrics": metrics,
            "heatmap": (rs[0].get("figures", {}).get("best") or {}).get("element_similarity"),
            "curves": [r.get("curves") or {} for r in rs],
            "val_drop": summarize([largest_val_drop(r.get("curves") or {}) for r in rs]),
            "curve_end": {k: summarize([last_value(r.get("curves") or {}, k) for r in rs]) for k in END_KEYS},
        }
    return out


def _evidence(claim, v: dict, v_final: dict, agg: dict, budget: str) -> str:
    d, t = v["diff"], v["threshold"]
    paired = ", paired by seed" if v.get("paired") else ""
    if v["verdict"] == "missing":
        absent = [c for c in (claim.a, claim.b) if c not in agg]
        return (f"cell(s) {', '.join(absent)} not finished (see cells/<name>/seed<k>/cell_error.json)" if absent
                else f"metric {claim.metric!r} not produced by the evaluation")
    parts = []
    if v["verdict"] == "inconclusive (1 seed)":
        parts.append("one seed: no seed spread to compare the difference with (run --seeds ≥ 3)")
    elif v["verdict"] == "direction only":
        parts.append(f"Δ = {d:+.2f} has the paper's sign beyond {spread_name(v)} = {t:.2f}{paired}, but is "
                     f"{abs(d / claim.paper_delta):.1%} of the paper's {claim.paper_delta:+.2f}")
    elif v["verdict"] == "reproduced" and claim.kind == "no_loss":  # reproduced = no fall beyond the spread
        return (f"Δ = {d:+.2f} ≥ −{spread_name(v)} = {-t:.2f}: no loss beyond the seed spread "
                f"(n = {v['n'][0]}/{v['n'][1]}{paired})")
    elif v["verdict"] == "reproduced":
        size = f"; {d / claim.paper_delta:.0%} of the paper's {claim.paper_delta:+.2f}" if claim.paper_delta else ""
        return f"Δ = {d:+.2f} beyond {spread_name(v)} = {t:.2f} (n = {v['n'][0]}/{v['n'][1]}{paired}){size}"
    elif v["verdict"] == "not reproduced":
        parts.append(f"|Δ| = {abs(d):.2f} within the seed spread {spread_name(v)} = {t:.2f} "
                     f"(n = {v['n'][0]}/{v['n'][1]}{paired})")
    else:
        parts.append(f"Δ = {d:+.2f} against the paper's direction, beyond {spread_name(v)} = {t:.2f}{paired}")
    if v_final["verdict"] != v["verdict"]:
        parts.append(f"final-state parameters give '{v_final['verdict']}'")
    facts = suite_facts(claim, agg)
    if facts:  # suite accuracies: is either model above chance at all, and did the heads move the frozen CLIP?
        if facts["at_chance"]:
            parts.append(f"data: both models within {NEAR_CHANCE:.0f} points of chance ({facts['chance']:.0f}%) on "
                         "these suites")
            if facts["controls"]:
                parts.append("with the wrong image the suites are already at chance before CIMR, so there is no "
                             "image-independent preference left for it to remove")
        local = [(n, (agg[n].get("curve_end") or {}).get("mean_abs_s_local") or {}) for n in (claim.a, claim.b)]
        local = [(n, s) for n, s in local if s.get("mean") is not None and s["mean"] > 0]
        if local:  # how much the ICER local branch adds to the score s = s_G + α s_L by the end of training
            def which(n, s):  # the cell, and how many of its seeds carry curves when not all do
                return n if s["n"] == agg[n]["n_seeds"] else f"{n}, {s['n']} of {agg[n]['n_seeds']} seeds"
            parts.append("local-branch score at the last step: mean |s_L| " + ", ".join(
                f"{s['mean']:.3f} ({which(n, s)})" for n, s in local) + " against a global cosine score in [−1, 1]")
        if facts["near_base"]:
            parts.append(f"both heads within {HEAD_NEAR_BASE:.0f} points of the frozen CLIP alone "
                         f"({facts['base']:.1f}%): at this budget the heads barely move its scores")
    if claim.metric == "rsum":  # what the elements did: the set spread (CV) often moves against RSUM here
        cvs = [(agg[c]["metrics"]["best"].get("cv_log_image") or {}).get("mean") for c in (claim.a, claim.b)]
        if None not in cvs:
            parts.append(f"image-element ln CV {cvs[0]:.2f} → {cvs[1]:.2f}")
    unstable = [c for c in (claim.a, claim.b) if agg[c]["stability"]["nonfinite_losses"]]
    if unstable:
        parts.append(f"training: non-finite losses in {', '.join(unstable)}")
    detail = agg[claim.a]["budget_detail"]
    length = (f"{detail['num_steps']} steps" if detail["num_steps"] else f"{detail['num_epochs']} epochs")
    parts.append(f"budget '{budget}': {length}, batch {detail['batch_size']}, data preset {detail['preset']}"
                 + (" (a plumbing check, not a test of the claim)" if budget == "smoke" else ""))
    if claim.setting:
        parts.append(f"setting: {claim.setting} (see Settings below the table)")
    return "; ".join(p for p in parts if p)


def claim_rows(agg: dict, budget: str) -> list[dict]:
    rows = []
    for c in CLAIMS:
        res = {w: check(agg, c, which=w) for w in ("best", "final")}
        mean = lambda cell: summarize(cell_values(agg, cell, "best", c.metric))  # noqa: E731
        rows.append({"id": c.id, "claim": c.group, "text": c.text, "source": c.source, "a": c.a, "b": c.b,
                     "metric": c.metric, "kind": c.kind, "paper": {"a": c.paper_a, "b": c.paper_b,
                                                                   "diff": c.paper_delta},
                     "ours": {"a": mean(c.a), "b": mean(c.b), **res["best"]}, "ours_final": res["final"],
                     "verdict": res["best"]["verdict"], "evidence": _evidence(c, res["best"], res["final"], agg,
                                                                              budget)})
    by_id = {r["id"]: r for r in rows}
    for c, r in zip(CLAIMS, rows):  # a miss whose comparison holds in the other recipe: say so
        other = by_id.get(c.see_also)
        if other and r["verdict"] not in ("reproduced", "missing") and other["ours"]["diff"] is not None:
            r["evidence"] += (f"; the same comparison in the other recipe ({other['text']}; {other['a']} → "
                              f"{other['b']}): Δ = {other['ours']['diff']:+.2f}, {other['verdict']}")
    return rows


def _ms(s: dict | None, digits: int = 2, of: int | None = None) -> str:
    """mean ± std (mean alone for one value); "(n = k)" when only k of the cell's `of` seeds have the value."""
    if not s or s.get("mean") is None:
        return "–"
    text = f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}" if s["n"] > 1 else f"{s['mean']:.{digits}f}"
    return text + (f" (n = {s['n']})" if of is not None and s["n"] < of else "")


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")  # a bare | would end the table cell


def _table(header, rows) -> list[str]:
    return ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(x) for x in r) + " |" for r in rows), ""]


def _num(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _retrieval_rows(agg, group):
    rows = []
    for name, c in agg.items():
        if c["group"] != group:
            continue
        b, f = c["metrics"]["best"], c["metrics"]["final"]
        rows.append([c["label"], c["n_seeds"], _ms(b.get("rsum")), _ms(f.get("rsum")),
                     _ms(b.get("retrieval/maxmatch/rsum")), _ms(b.get("retrieval/maxmatch_topk/rsum")),
                     _ms(b.get(f"retrieval/{_own(name)}/rsum")), _ms(b.get(f"retrieval/{_own(name)}/i2t_r1")),
                     _ms(b.get(f"retrieval/{_own(name)}/t2i_r1"))])
    return rows


def _own(name: str) -> str:
    spec = next(s for s in SPECS if s.name == name)
    return spec.similarity or {"clip": "cosine"}.get(name, "flowclip" if name.startswith("flowclip") else "global_m")


def render_markdown(report: dict) -> str:
    agg, budget = report["cells"], report["budget"]
    L = [f"# Reproduction report ({budget} budget)", "",
         f"Regenerate: `{report['command']}` (finished cells are skipped, an interrupted one resumes from its last "
         f"checkpoint; to retrain one, delete its directory `cells/<name>/seed<k>/` and, with `--archive`, its record "
         f"`<budget>/<name>/seed<k>.json`). Total cell wall time: "
         f"{report['wall_s_total']:.0f} s ({report['wall_s_total'] / 3600:.1f} h) "
         f"on {report['machine']}; the grid table gives each cell's 1-minute load average when it finished "
         "(– where the cell predates that record).", ""]
    if report.get("restored"):
        share = (f"All {report['restored']}" if report["restored"] == report["runs_finished"]
                 else f"{report['restored']} of the {report['runs_finished']}")
        L += [f"{share} cell runs come from the committed cell "
              f"records (`--archive`, `reproduce.archive`): their numbers, wall time, load and code version are "
              "those of the run that made the record; the heat maps are re-drawn from the stored matrices.", ""]
    code_line = provenance.sentence(report["code"], report["code"]["end_labelled"]) if report.get("code") else ""
    L += ([code_line, ""] if code_line else []) + [PROTOCOL_NOTE, ""]
    done, expected = report["runs_finished"], report["runs_expected"]
    if done < expected:
        missing = [f"{c['label']} ({expected // len(SPECS) - c['n_seeds']})" for c in agg.values()
                   if c["n_seeds"] < expected // len(SPECS)]
        missing += [s.label + f" ({expected // len(SPECS)})" for s in SPECS if s.name not in agg]
        L += [f"**Partial grid: {done} of {expected} cell runs finished** ({expected // len(SPECS)} seeds × "
              f"{len(SPECS)} cells). Seeds still to run: {', '.join(missing)}. The same command resumes the grid; "
              "claims on cells with one seed are 'inconclusive (1 seed)'.", ""]
    if budget == "smoke":
        L += [f"**Smoke budget** ({SMOKE_STEPS} steps per cell, ShapesWorld `tiny`): these numbers check the "
              "pipeline, not the papers' claims.", ""]
    L += summary.section(report["claims"], _table)
    L += ["## Grid and budget", ""]
    with_curves = sum(bool(cur) for c in agg.values() for cur in c["curves"])
    L += ["Stability: 'largest val drop' is the largest fall of validation RSUM below its best value so far over a "
          "run (0 = the curve never falls; a collapse when hardest negatives come in would show here), mean ± std "
          "over seeds; the curves themselves are in figures/training_curves.png. "
          + (f"{with_curves} of the {done} cell runs carry their training curves (n = k marks a cell where only k "
             "seeds do: records made before the runner kept curves have none); 'best val RSUM' and 'notes' cover "
             "every seed." if with_curves < done else ""), ""]
    L += _table(["cell", "group", "seeds", "steps / epochs", "batch", "data", "validation", "wall s / seed",
                 "load at end", "code", "non-finite losses", "best val RSUM", "largest val drop", "notes"],
                [[c["label"], c["group"], c["n_seeds"], c["budget_detail"]["num_steps"] or
                  f"{c['budget_detail']['num_epochs']} ep", c["budget_detail"]["batch_size"],
                  c["budget_detail"]["preset"], c["budget_detail"]["validation"], _ms(c["wall_s"], 0),
                  _ms(c.get("load_end"), 1), ", ".join(c.get("commits") or ["–"]),
                  c["stability"]["nonfinite_losses"], _ms(c["stability"]["best_val_rsum"]),
                  _ms(c.get("val_drop"), of=c["n_seeds"]),
                  "; ".join(c["notes"])]
                 for c in agg.values()])
    head = ["cell", "seeds", "RSUM (best)", "RSUM (final)", "S_H exact RSUM", "top-k RSUM", "own-score RSUM",
            "I2T R@1", "T2I R@1"]
    L += ["## MaxMatch ablation", "", "Test split; 'best' = best-on-validation parameters, 'final' = last step; the "
          "other columns use the best ones. RSUM = the paper's inference score (top-k for S_H-trained cells, else "
          "the cell's own similarity); mean ± std over seeds. Exact S_H and top-k columns score every cell alike.",
          ""]
    L += _table(head, _retrieval_rows(agg, "ablation"))
    L += ["## Baselines", "", "Reference recipes, columns as in the ablation table (best-on-validation "
          "parameters unless marked final).", ""] + _table(head, _retrieval_rows(agg, "baselines"))
    set_cells = [(n, c) for n, c in agg.items() if "single/full" in c["metrics"]["best"]]
    k = max((sum(m.startswith("single/element") for m in c["metrics"]["best"]) for _, c in set_cells), default=0)
    L += ["## Single-element retrieval", "", "RSUM with each image element alone (caption sets complete), best "
          "parameters; gap = full − weakest element.", ""]
    L += _table(["cell", "full set", *[f"element {i}" for i in range(k)], "gap"],
                [[c["label"], _ms(c["metrics"]["best"]["single/full"]),
                  *[_ms(c["metrics"]["best"].get(f"single/element{i}")) for i in range(k)],
                  _ms(c["metrics"]["best"].get("single_gap"))] for _, c in set_cells])
    cv_keys = [f"cv/{s}/{v}/mean_log_cv" for s in ("image", "text") for v in ("set", "residual")]
    L += ["## Circular variance", "", "Mean ln CV per modality (CV = 1 − ‖mean of the unit elements‖; more "
          "negative = more collapsed), best parameters.", ""]
    L += _table(["cell", "image elements", "image residuals", "text elements", "text residuals"],
                [[c["label"], *[_ms(c["metrics"]["best"].get(key), 3) for key in cv_keys]] for _, c in set_cells])
    L += ["## Element-similarity heat maps", ""]
    copied = report.get("heatmaps") or {}
    maps = [f"- {c['label']} (seed {c['seeds'][0]}): ![{c['label']}]({copied[n]})" for n, c in set_cells if n in copied]
    L += ["Mean cosine of image element i and caption element j over matching test pairs (best parameters).", ""]
    L += (maps or ["(none written)"]) + [""] + _flowclip_section(agg)
    L += ["## Claims", "", "Ours = mean over seeds of the best-parameter numbers; Δ = b − a; verdict by the rule "
          "below.", ""]
    L += _table(["claim", "comparison (a → b)", "metric", "source", "paper a → b (Δ)", "ours a → b", "ours Δ",
                 "verdict", "evidence"],
                [[f"{r['claim']}: {r['text']}", f"{r['a']} → {r['b']}", r["metric"], r["source"],
                  _paper(r["paper"]), f"{_ms(r['ours']['a'])} → {_ms(r['ours']['b'])}",
                  "–" if r["ours"]["diff"] is None else f"{r['ours']['diff']:+.2f}", f"**{r['verdict']}**",
                  r["evidence"]] for r in report["claims"]])
    L += ["Settings (what differs between the paper's setup and ours; a missed claim's evidence names one):", ""]
    L += [f"- **{key}**: {text}" for key, text in SETTINGS.items()] + [""]
    L += longer_budget.section(report, _ms, _table)
    L += other_defaults.section(report, _ms, _table)
    L += ["## Figures", ""] + [f"![{n}]({p})" for n, p in report["figures"].items()] + [""]
    L += ["## Verdict rule", "", report["verdict_rule"], ""]
    return "\n".join(L)


def _paper(p: dict) -> str:
    ab = f"{_num(p['a'])} → {_num(p['b'])}" if p["a"] is not None else "–"
    return ab + (f" ({p['diff']:+.2f})" if p["diff"] is not None else "")


def _flowclip_section(agg: dict) -> list[str]:
    cells = [c for c in agg.values() if c["group"] == "flowclip"]
    L = ["## Flow-CLIP grid", "", "Test-split accuracy (%) with Real / Shuffle / Fixed images per suite, "
         "best-on-validation parameters (mean over seeds; ± std in reproduction.json); binding and ARO-style rows "
         "are means over their suites.", ""]
    if not cells:
        return L + ["(no Flow-CLIP cells)", ""]
    tasks = sorted({k.split("/")[1] for c in cells for k in c["metrics"]["best"] if k.startswith("suite/")})

    def cell_text(c, prefix):
        vals = [(c["metrics"]["best"].get(f"{prefix}{cond}") or {}).get("mean") for cond in CONDITIONS]
        return " / ".join("–" if v is None else f"{v:.1f}" for v in vals)

    chance = lambda key: _num((cells[0]["metrics"]["best"].get(key) or {}).get("mean"), 0)  # noqa: E731
    rows = [[t, *[cell_text(c, f"suite/{t}/") for c in cells], chance(f"suite/{t}/chance")] for t in tasks]
    rows += [[f"**{g} mean**", *[cell_text(c, f"{g}_") for c in cells], chance(f"{g}_chance")]
             for g in ("binding", "aro")]
    L += _table(["suite", *[c["label"] for c in cells], "chance"], rows)
    L += _table(["cell", "seeds", "retrieval RSUM (best)", "RSUM (final)"],
                [[c["label"], c["n_seeds"], _ms(c["metrics"]["best"].get("rsum")),
                  _ms(c["metrics"]["final"].get("rsum"))] for c in cells])
    return L


def machine_description() -> str:
    return f"{os.cpu_count()} CPU core(s), {platform.machine()} {platform.system()}, Python {platform.python_version()}"


def build_report(records: list[dict], *, budget: str, seeds: int, command: str, out: str,
                 long_records: list[dict] | None = None, long_out: str = "") -> dict:
    """The report dict; `long_records` (cells of a `long` budget grid in `long_out`) feed the "Longer budget"
    section and end the evidence of the claims whose two cells both ran there (`reproduce.longer_budget`)."""
    agg = aggregate(records)
    claims = claim_rows(agg, budget)
    report = {"budget": budget, "seeds": seeds, "command": command, "out": out, "machine": machine_description(),
              "protocol": PROTOCOL_NOTE,
              "verdict_rule": VERDICT_RULE, "cells": agg, "claims": claims,
              "runs_finished": len(records), "runs_expected": seeds * len(SPECS),
              "wall_s_total": sum(r["wall_s"]["total"] for r in records), "figures": {}, "heatmaps": {},
              "restored": sum(bool(r.get("restored_from")) for r in records),
              "long": None, "knob_claims": other_defaults.knob_claim_rows(agg),
              "code": {**provenance.compare(provenance.commits_of(records)),
                       "end_labelled": provenance.end_labelled(records)}}
    by_id = {r["id"]: r for r in claims}
    for row in report["knob_claims"]:  # the knob's verdict joins the claim's evidence and the Summary
        by_id[row["id"]]["evidence"] += "; " + other_defaults.evidence_suffix(row)
        by_id[row["id"]].setdefault("knobs", []).append(
            {k: row[k] for k in ("knob", "a", "b", "diff", "threshold", "n", "verdict")})
    if long_records:
        long_agg = aggregate(long_records)
        long_claims = longer_budget.long_claim_rows(long_agg)
        for row in long_claims:
            by_id[row["id"]]["evidence"] += "; " + longer_budget.evidence_suffix(row)
            by_id[row["id"]]["long"] = {k: row[k] for k in ("diff", "threshold", "n", "verdict", "length")}
        long_knobs = longer_budget.long_knob_rows(long_agg)
        for row in long_knobs:
            by_id[row["id"]]["evidence"] += "; " + longer_budget.evidence_suffix(row)
            by_id[row["id"]].setdefault("long_knobs", []).append(
                {k: row[k] for k in ("knob", "a", "b", "diff", "threshold", "n", "verdict", "length")})
        command_long = "; ".join(longer_budget.regenerate_commands(long_records, long_out))
        report["long"] = {"out": long_out, "command": command_long, "factor": LONG_FACTOR, "cells": long_agg,
                          "claims": long_claims, "knob_claims": long_knobs,
                          "wall_s_total": sum(r["wall_s"]["total"] for r in long_records)}
    by_claim = {c.id: c for c in CLAIMS}
    for row in claims:
        row["why"] = short_why(row, by_claim[row["id"]], agg, by_id)
    return report


def write_report(records: list[dict], out: str, *, budget: str, seeds: int, command: str,
                 long_records: list[dict] | None = None, long_out: str = "") -> dict:
    """Writes reproduction.md, reproduction.json and figures/ into `out`; returns the report dict."""
    report = build_report(records, budget=budget, seeds=seeds, command=command, out=out, long_records=long_records,
                          long_out=long_out)
    report["figures"] = write_figures(report["cells"], out)
    report["heatmaps"] = copy_heatmaps(report["cells"], out)
    with open(os.path.join(out, "reproduction.json"), "w") as f:
        json.dump({**report, "records": records}, f, indent=1)
    with open(os.path.join(out, "reproduction.md"), "w") as f:
        f.write(render_markdown(report))
    return report


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
        if stale.endswith(".png"):     # of cell records (docs/reproduction/records) stays
            os.remove(os.path.join(fig_dir, stale))
    shutil.copytree(os.path.join(out, "figures"), fig_dir, dirs_exist_ok=True)
    name = os.path.basename(fig_dir)
    text = text.replace("](figures/", f"]({name}/")
    with open(path, "w") as f:
        f.write(text)
    return fig_dir
