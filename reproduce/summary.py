"""The report's Summary: one line per claim and its 'why, in short' (`short_why`), from the facts the claim
rows carry — the verdict against the seed spread, data facts about the suites (`suite_facts`: at chance, heads near
the frozen CLIP), and the re-checks that change a verdict (the other recipe, a knob, a longer budget).
"""

from __future__ import annotations

from reproduce.claims import spread_text
from reproduce.metrics import CONDITIONS

HEAD_NEAR_BASE = 2.0   # points: a suite claim's evidence notes heads this close to the frozen CLIP they sit on
NEAR_CHANCE = 5.0      # points: a suite claim's evidence notes when both cells are this close to chance


def suite_facts(claim, agg: dict) -> dict:
    """For a suite-accuracy claim ({} otherwise): the chance level, whether both cells are within NEAR_CHANCE points
    of it ("at_chance"; "controls": the metric is a Shuffle/Fixed control), and whether both heads are within
    HEAD_NEAR_BASE points of the frozen CLIP alone ("near_base", "base")."""
    if not claim.metric.endswith(CONDITIONS) or claim.a not in agg or claim.b not in agg:
        return {}
    group = claim.metric.rsplit("_", 1)[0]

    def mean(cell, key):
        return ((agg.get(cell) or {}).get("metrics", {}).get("best", {}).get(key) or {}).get("mean")

    chance = mean(claim.a, f"{group}_chance")
    means = [mean(c, claim.metric) for c in (claim.a, claim.b)]
    base = mean("clip", claim.metric)
    near = lambda ref, tol: ref is not None and all(m is not None and abs(m - ref) < tol for m in means)  # noqa: E731
    return {"chance": chance, "at_chance": near(chance, NEAR_CHANCE),
            "controls": claim.metric.endswith(("_shuffle", "_fixed")), "base": base,
            "near_base": near(base, HEAD_NEAR_BASE)}


def short_why(row: dict, claim, agg: dict, by_id: dict) -> str:
    """The Summary's 'why, in short' for a claim row (after its knob and long-budget re-checks are attached): the
    statistical outcome, the data facts behind a miss, and what changes the verdict (another recipe, another
    default, a longer budget). '–' for a reproduced row with nothing else to say."""
    v, o = row["verdict"], row["ours"]
    parts = {"not reproduced": ["within the seed spread"],
             "reversed": ["opposite sign, beyond the seed spread"],
             "inconclusive (1 seed)": ["one seed"], "missing": ["a cell or metric is missing"]}.get(v, [])
    if v == "direction only":
        parts.append(f"{abs(o['diff'] / claim.paper_delta):.0%} of the paper's size")
    facts = suite_facts(claim, agg)
    if v != "reproduced" and facts.get("near_base"):
        parts.append(f"heads within {HEAD_NEAR_BASE:.0f} points of the frozen CLIP")
    if v != "reproduced" and facts.get("at_chance") and facts.get("controls"):
        parts.append("wrong-image controls at chance before CIMR")
    other = by_id.get(claim.see_also)
    if v != "reproduced" and other and other["verdict"] != v and other["ours"]["diff"] is not None:
        parts.append(f"other recipe ({other['a']} → {other['b']}): {other['verdict']}")
    signed = lambda x: "–" if x is None else f"{x:+.2f}"  # noqa: E731
    for k in row.get("knobs") or ():
        if k["verdict"] != v:
            parts.append(f"with `{k['knob']}`: Δ {signed(k['diff'])}, {k['verdict']}")
    lr = row.get("long")
    if lr and lr["diff"] is not None:
        parts.append(f"{lr['length']}: Δ {lr['diff']:+.2f}, {lr['verdict']}")
    for k in row.get("long_knobs") or ():
        parts.append(f"{k['length']} with `{k['knob']}`: Δ {signed(k['diff'])}, {k['verdict']}")
    return "; ".join(parts) or "–"


def section(rows: list[dict], table) -> list[str]:
    """Markdown lines: one row per claim with the paper's difference, ours with its seed spread, the verdict and
    'why, in short' (details: the Claims section); `table(header, rows)` renders a table."""
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    L = ["## Summary", "", f"Verdicts: {tally} (of {len(rows)} claim rows). Δ = b − a as in the Claims section, "
         "whose evidence column gives the full account of each row; 'ours / paper' is our Δ as a share of the paper's "
         "(negative: the other way; different benchmarks, so a size, not a match). 'Why, in short': the outcome "
         "against the seed spread, the data facts behind a miss, and what changes the verdict — the same "
         "comparison in the other recipe, another reading of an unstated default (Other defaults), a longer budget "
         "(Longer budget).", ""]
    delta = lambda o: "–" if not o or o["diff"] is None else f"{o['diff']:+.2f}{spread_text(o)}"  # noqa: E731
    head = ["claim", "a → b", "paper Δ", "ours Δ", "ours / paper", "verdict", "why, in short"]
    body = []
    for r in rows:
        paper = "–" if r["paper"]["diff"] is None else f"{r['paper']['diff']:+.2f}"
        ratio = ("–" if r["paper"]["diff"] in (None, 0) or r["ours"]["diff"] is None
                 else f"{r['ours']['diff'] / r['paper']['diff']:.0%}")
        body.append([f"{r['claim']}: {r['text']}", f"{r['a']} → {r['b']}", paper, delta(r["ours"]), ratio,
                     f"**{r['verdict']}**", r.get("why") or "–"])
    return L + table(head, body)
