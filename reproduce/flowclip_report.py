"""The Flow-CLIP study's section of the report (`reproduce.report`): gates, pilot, heads' budget, rows and controls,
rendered from `reproduce.flowclip_study.build`'s output; then the mechanism oracle's table
(`reproduce.flowclip_oracle`), which decides no row.
"""

from __future__ import annotations

from reproduce import stats
from reproduce.flowclip_oracle import CHANCE, summarise
from reproduce.flowclip_study import (BLIND_HOLDOUT, BLIND_MARGIN, CONTROL_SUITES, EQUIV_MARGIN, GAIN,
                                      GROUNDING_MARGIN, HEADS, PILOT_BASE, PLATEAU_POINTS, PROBE_MARGIN, _f)
from reproduce.grid import FLOWCLIP_HEAD_EPOCHS


def section(study: dict | None, table) -> list[str]:
    L = ["## Flow-CLIP study (protocol: [docs/reproduction/flowclip_protocol.md](reproduction/flowclip_protocol.md))",
         ""]
    if study is None:
        return L + ["No records yet: the study's bases, pilot and heads have not run (`--budget flowclip_pilot`, "
                    "`--budget flowclip`, cells `fcs_*`; reproduce/README.md).", ""]
    p = study["pilot"]
    L += [f"**Pilot** (seed 0 of each head on base {PILOT_BASE}, 5 epochs, validation binding mean under Real): "
          + (f"budget E = {p['epochs']} epoch(s)." if p["epochs"] is not None else
             f"{len(p['heads'])} of {len(HEADS)} heads run; the budget is not set yet."), ""]
    if p["heads"]:
        L += table(["head", "plateau epoch", "best validation binding mean", "validations"],
                   [[h, v["epoch"], _f(v["best"]), len(v["values"])] for h, v in p["heads"].items()])
        L += [""]
    L += ["**Gate 1 — what the bases' local tokens carry** (test-split probes; accuracy vs majority rate; "
          f"a label passes at majority + {PROBE_MARGIN:g}, grounding at area chance + {GROUNDING_MARGIN:g})", ""]
    rows = []
    for b, g in study["gates"].items():
        if not g.get("base_run"):
            rows.append([b, *["–"] * 6, "not run"])
            continue
        pr, gr = g["probes"], g["grounding"]
        rows.append([b, *(f"{_f(a)} vs {_f(m)}" for a, m in (pr[k] for k in ("colour", "shape", "size", "cell"))),
                     f"{_f(gr[0])} vs {_f(gr[1])} (uniform {_f(gr[2])})",
                     "yes" if g["binding"] else "no", "yes" if g["relation"] else "no"])
    L += table(["base", "colour", "shape", "size", "cell", "grounding vs area chance", "binding gate",
                "relation gate"], rows) + [""]
    L += ["**Gate 2 — where a language prior exists** (blind text-only baseline on the heads' test tables, mean over "
          f"the base's heads; a suite is prior-bearing at chance + {BLIND_MARGIN:g} with held-out pair accuracy ≥ "
          f"{BLIND_HOLDOUT:g} %)", ""]
    L += table(["base", "held-out pair acc.", *CONTROL_SUITES],
               [[b, _f(g["holdout"]), *(f"{_f(g['blind'][s][0])} / {_f(g['blind'][s][1], '{:.0f}')}"
                                        + (" ✓" if s in g["prior_suites"] else "") for s in CONTROL_SUITES)]
                for b, g in study["gates"].items()]) + ["", "(cells: blind / chance, ✓ prior-bearing)", ""]
    hb = study.get("head_budgets") or {}
    if hb:
        L += [f"**Heads' budget** (E = {FLOWCLIP_HEAD_EPOCHS} epochs for the study's heads, 2E for the `_2e` "
              "cells; a head is *still rising* when its best validation binding mean falls in its last epoch, as "
              "the protocol flags; late rise = the last epoch's best minus the best before it, against the pilot's "
              f"plateau threshold {PLATEAU_POINTS:g})", ""]
        L += table(["head cell", "epochs", "seeds", "best at epoch (mean)", "still rising", "late rise (mean)",
                    "late rise (max)"],
                   [[name, v["epochs"], v["seeds"], _f(v["best_epoch"], "{:.2f}"),
                     f"{v['still_rising']} of {v['seeds']}", _f(v["late_rise"], "{:+.2f}"),
                     _f(v["late_rise_max"], "{:+.2f}")] for name, v in hb.items()]) + [""]
    L += ["**Rows** (paired by head seed on one base; one look at α = 0.05; FC3's interval at 90 %)", ""]
    L += rows_table(study["rows"], table) + [""]
    for b, by_head in study["controls"].items():
        suites = study["gates"][b]["prior_suites"]
        if not suites:
            continue
        L += [f"**Controls on base {b}'s prior-bearing suites** (accuracy %, mean ± std over head seeds; blind and "
              "chance beside)", ""]
        L += table(["suite", "head", "Real", "Shuffle", "Fixed", "blind", "chance"],
                   [[s, h, *(f"{_f(v[c]['mean'])} ± {_f(v[c]['std'] if v[c]['n'] > 1 else None)}"
                              for c in ("real", "shuffle", "fixed")),
                     _f(study["gates"][b]["blind"][s][0]), _f(study["gates"][b]["blind"][s][1], "{:.0f}")]
                    for s in suites for h, by_suite in by_head.items() for v in [by_suite[s]]]) + [""]
    return L


def rows_table(rows: list[dict], table) -> list[str]:
    """The rows of `flowclip_study.build` as a table (the report's, and notebook 03's)."""
    body = []
    for r in rows:
        res = r["result"]
        test = ("–" if res.get("t") is None else
                f"t = {res['t']:.2f}, ν = {res['df']:.0f}, {'TOST p' if r['id'] == 'FC3' else 'p'} = {res['p']:.3g} "
                f"(n = {res['n']})")
        ci = "–" if res.get("ci") is None else f"[{res['ci'][0]:+.2f}, {res['ci'][1]:+.2f}]"
        body.append([r["id"], r["base"], r["statement"], f"{r['heads'][0]} → {r['heads'][1]}", r["quantity"],
                     _f(res.get("delta"), "{:+.2f}"), ci, test, f"**{res['verdict']}**", res.get("why", "–")])
    return table(["id", "base", "statement", "heads", "quantity", "Δ̄", "CI", "test", "verdict", "why"], body)


def _test(test, fmt="{:+.2f}") -> str:
    return "–" if test is None else f"{_f(test.delta, fmt)} (p = {test.p:.3g})"


def _real(real: dict) -> str:
    t = real["test"]
    if t is None:  # every pair equal (e.g. both heads at 100 %): no spread for a test
        return f"{_f(real['delta'], '{:+.2f}')} in every pair, {real['verdict']}"
    return f"{_f(t.delta, '{:+.2f}')} (TOST p = {stats.tost_p(t, EQUIV_MARGIN):.3g}), {real['verdict']}"


def oracle_section(record: dict | None, table) -> list[str]:
    """The lines for the mechanism oracle (`reproduce.flowclip_oracle`; empty when it has not been run)."""
    if not record:
        return []
    L = ["**Mechanism oracle (planted features; decides no row)** — the study's head recipe (Adam 1e-3, batch "
         f"{record['batch_size']}, {record['steps']} steps, "
         f"λ_CIMR = {record['heads']['flowclip_cimr']['lambda_cimr']:g}, the Flow-CLIP defaults) on frozen features "
         "where both effects are planted (`reproduce/flowclip_oracle.py`): *swap* negatives share the positive's bag "
         "of words, so only bound tokens tell them apart; *replace* negatives carry a rare colour, a caption-only "
         f"cue. σ = feature noise; {len(record['seeds'])} worlds and head seeds per σ, paired. Accuracy %; excess = "
         f"over chance ({CHANCE:g}) on the replace records; d = (a − b) − ½ (a − chance), FC1/FC2's quantity "
         "(> 0: CIMR removed at least half); Real change with TOST at ±1 (FC3's).", ""]
    rows, summary = [], summarise(record)
    for s in summary:
        b = s["binding"]
        rows.append([f"{s['noise']:g}", f"{_f(b['globalm'], '{:.1f}')} → {_f(b['flowclip'], '{:.1f}')}",
                     _test(b["test"]), _f(s["blind"], "{:.1f}"), _f(s["real"]["hnb"], "{:.1f}"),
                     *(f"{_f(s[c]['excess_hnb'], '{:+.1f}')} → {_f(s[c]['excess_cimr'], '{:+.1f}')} (paired p = "
                       f"{_f(None if s[c]['moved'] is None else s[c]['moved'].p, '{:.3g}')}); d̄ "
                       + _test(s[c]["test"]) for c in ("shuffle", "fixed")),
                     _real(s["real"])])
    L += table(["σ", "swap Real: Global-M → Flow-CLIP (HNB)", "binding gain", "blind (replace)", "Real, HNB",
                "Shuffle excess: HNB → CIMR", "Fixed excess: HNB → CIMR", "Real: CIMR − HNB"], rows) + [""]
    L += [_oracle_reading(summary), ""]
    return L


def _at(summary, ok) -> str:
    hits = [f"{s['noise']:g}" for s in summary if ok(s)]
    return ", ".join(hits) if hits else "none"


def _oracle_reading(summary: list[dict]) -> str:
    """One computed sentence per effect: where the recipe showed it (α = 0.05, the study's criteria)."""
    def sig(t, sign=1):
        return t is not None and t.p < stats.ALPHA and sign * t.delta > 0

    return (f"Where the recipe shows each effect (σ values; p < {stats.ALPHA:g}): binding gain ≥ +{GAIN:g} at "
            f"{_at(summary, lambda s: sig(s['binding']['test']) and s['binding']['test'].delta >= GAIN)}; CIMR "
            f"lowered Shuffle at {_at(summary, lambda s: sig(s['shuffle']['moved'], -1))} and Fixed at "
            f"{_at(summary, lambda s: sig(s['fixed']['moved'], -1))}; it raised either at "
            f"{_at(summary, lambda s: sig(s['shuffle']['moved']) or sig(s['fixed']['moved']))}; FC1/FC2's criterion "
            f"(at least half removed) held at {_at(summary, lambda s: sig(s['shuffle']['test']))} (Shuffle) and "
            f"{_at(summary, lambda s: sig(s['fixed']['test']))} (Fixed); Real kept within ±{EQUIV_MARGIN:g} at "
            f"{_at(summary, lambda s: s['real']['verdict'] == 'reproduced')}.")
