"""The claims (`reproduce.claims`): each one consistent with the grid, the quantities and the declared protocol
(docs/reproduction/protocol.md), its quote the source's words; the per-seed quantities against hand computation;
and `decide` on planted cells ({cell: {seed: metrics}}) with hand-chosen numbers — every test kind, TOST, the
intersection–union row, the two-look procedure, missing cells and values, protocol, score and knob substitution."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from reproduce import claims as C
from reproduce import grid, stats

ROOT = Path(__file__).resolve().parents[2]
A2 = C.HEADLINE_ALPHA
BY_ID = C.CLAIM_BY_ID


def cells(key="rsum_sem", **values):
    """{cell: {seed: {key: value}}} from cell=[value of seed 0, 1, …] (None: that seed did not run)."""
    return {n: {k: {key: float(v)} for k, v in enumerate(vs) if v is not None} for n, vs in values.items()}


def plus(xs, d):
    return [x + d for x in xs]


# ---------------------------------------------------------------- the claims themselves


def test_every_claim_is_consistent_with_the_grid_and_the_quantities():
    assert len({c.id for c in C.CLAIMS}) == len(C.CLAIMS)
    assert [c.id for c in C.CLAIMS if c.table == "maxmatch"] == ["M1", "M2a", "M2b", "M2c", "M3", "S1", "S2", "S3",
                                                                 "C1", "P1", "B1", "B2"]
    arity = {"welch": 2, "paired": 2, "contrast": 4, "one_sample": 1}
    for c in C.CLAIMS:
        assert c.table in C.TABLES and c.test in C.TESTS and c.direction in stats.DIRECTIONS, c.id
        assert c.quantity in C.QUANTITIES and c.quantity in C.QUANTITY_NAMES, c.id
        assert all(n in grid.SPEC_BY_NAME for n in c.cells), c.id
        assert len(c.cells) == arity[c.test] if c.test in arity else len(c.cells) >= 3, c.id
        assert bool(c.quote) == (c.table != "derived"), c.id          # the source's words, and only for its rows
        assert (c.direction == "equal") == (c.margin is not None and c.margin > 0), c.id
        if c.source_delta is not None and c.direction != "equal":
            assert (c.source_delta > 0) == (c.direction == "increase"), c.id
        if c.test == "paired":  # pairing by seed only where the cells share a trained base (the frozen CLIP)
            assert all(grid.SPEC_BY_NAME[n].needs_clip for n in c.cells), c.id
        # a retrieval-ground-truth quantity has semantic and source readings; the others read one key
        assert C.QUANTITIES[c.quantity][1] == (c.quantity in ("rsum", "gap_weakest", "gap_best", "rel_gap_mean"))


def _protocol_rows():
    text = (ROOT / "docs" / "reproduction" / "protocol.md").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| ([MSCPBD]\d[a-c]?) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = [x.strip() for x in m.group(2).split(" | ")]
    return rows


def test_the_claims_are_the_protocols_rows():
    """The declared protocol table (cells, quantity, test, direction, source Δ) and the code agree row by row."""
    rows = _protocol_rows()
    assert set(rows) == {c.id for c in C.CLAIMS if c.table in ("maxmatch", "derived")}
    names = lambda s: [t for t in re.findall(r"[a-z][a-z0-9_]+", s) if t in grid.SPEC_BY_NAME]  # noqa: E731
    for cid, (_, comparison, quantity, test, direction, value) in rows.items():
        c = BY_ID[cid]
        assert names(comparison) == names(c.comparison()), cid
        want_q = ("cv_image" if "CV" in quantity else "gap_weakest" if "weakest" in quantity else "gap_best"
                  if "best single" in quantity else "rel_gap_mean" if "mean single" in quantity else "rsum")
        assert c.quantity == want_q, cid
        want_t = ("contrast" if "contrast" in test else "best" if "intersection" in test else "one_sample"
                  if ("one-sample" in test or "TOST" in test) else "welch" if test == "Welch" else test)
        assert c.test == want_t, cid
        assert direction.split()[0] == c.direction, cid
        if "TOST" in test:
            assert float(re.search(r"±(\d+(?:\.\d+)?)", test).group(1)) == c.margin
        if re.fullmatch(r"\+\d+(\.\d+)?", value):
            assert float(value) == pytest.approx(c.source_delta), cid


def _squash(s):
    return re.sub(r"\s+", "", s)


@pytest.mark.parametrize("cid", [c.id for c in C.CLAIMS if c.quote])
def test_quotes_are_the_sources_words(cid):
    """Each quoted stretch (split at '…', and at ' — ' where a figure's number is joined to its caption) is in the
    source document, up to whitespace and citation markers like [33]."""
    seeds = next((p for p in (ROOT / "shared" / "seeds", ROOT.parent / "shared" / "seeds") if p.is_dir()), None)
    if seeds is None:
        pytest.skip("the source documents (shared/seeds) are not in this checkout")
    c = BY_ID[cid]
    doc = "000_" if c.ref.startswith("MaxMatch") else "001_"
    text = _squash(re.sub(r"\s*\[\d+(?:,\s*\d+)*\]", "", next(seeds.glob(doc + "*.txt")).read_text()))
    for stretch in re.findall(r'"([^"]+)"', c.quote) or [c.quote]:
        for frag in re.split(r"…| — ", stretch):
            frag = _squash(frag).strip(".")
            assert len(frag) < 4 or frag in text, (cid, frag)


# ---------------------------------------------------------------- per-seed quantities


SETS = {"single_sem/full": 400.0, "single_sem/element0": 390.0, "single_sem/element1": 380.0,
        "single_sem/element2": 398.0, "single_sem/element3": 392.0,
        "single/full": 300.0, "single/element0": 250.0, "single/element1": 280.0, "single_gap": 50.0,
        "rsum": 300.0, "rsum_sem": 400.0, "retrieval/mil/rsum": 250.0, "retrieval/mil/semantic/rsum": 350.0,
        "cv_log_image": -2.5}


@pytest.mark.parametrize("quantity,protocol,score,want", [
    ("gap_weakest", "semantic", None, 400.0 - 380.0), ("gap_best", "semantic", None, 400.0 - 398.0),
    ("rel_gap_mean", "semantic", None, 100 * (400.0 - 390.0) / 400.0),   # mean of the four elements: 390
    ("gap_weakest", "source", None, 50.0), ("gap_best", "source", None, 20.0),
    ("rel_gap_mean", "source", None, 100 * (300.0 - 265.0) / 300.0),
    ("rsum", "semantic", None, 400.0), ("rsum", "source", None, 300.0),
    ("rsum", "semantic", "mil", 350.0), ("rsum", "source", "mil", 250.0),
    ("cv_image", "semantic", None, -2.5), ("rsum", "semantic", "smooth_chamfer", None)])
def test_value_against_hand_computation(quantity, protocol, score, want):
    got = C.value(SETS, quantity, protocol, score)
    assert got == (None if want is None else pytest.approx(want))


def test_value_of_a_failed_or_absent_metric_is_none():
    assert C.value({"rsum_sem": float("nan")}, "rsum") is None
    assert C.value({"rsum": 300.0}, "rsum", "semantic") is None
    assert C.value({"single_sem/full": 400.0}, "gap_weakest") is None   # a full set without elements


def test_relative_gap_of_a_zero_rsum_set_is_no_value():
    assert C.value({"single_sem/full": 0.0, "single_sem/element0": 0.0}, "rel_gap_mean") is None


# ---------------------------------------------------------------- decide: the tests


def test_welch_reproduced_reversed_and_noise_against_scipy():
    a, b = [400.0, 401.0, 402.0], [410.0, 411.0, 412.0]
    r = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b))
    ref = st.ttest_ind(b, a, equal_var=False)     # the same test, computed independently
    assert r["verdict"] == "reproduced" and r["kind"] == "welch" and r["delta"] == pytest.approx(10.0)
    assert r["t"] == pytest.approx(ref.statistic) and r["p"] == pytest.approx(ref.pvalue) and ref.pvalue < A2
    assert r["df"] == pytest.approx(4.0) and r["n"] == [3, 3] and r["seeds"] == [0, 1, 2] and r["alpha"] == A2
    h = st.t.ppf(1 - A2 / 2, 4) * math.sqrt(2 / 3)
    assert r["ci"] == pytest.approx([10.0 - h, 10.0 + h]) and r["means"] == pytest.approx([401.0, 411.0])
    assert r["cells"] == ["sc_divmmd", "sh_divmmd"]
    assert C.decide(BY_ID["M1"], cells(sc_divmmd=b, sh_divmmd=a))["verdict"] == "reversed"
    noise = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=[400.5, 402.0, 400.0]))
    assert noise["verdict"] == "not reproduced" and noise["p"] > 0.5
    assert C.decide(BY_ID["M1"], cells(sc_divmmd=[400.0], sh_divmmd=[410.0]))["verdict"] == "inconclusive"
    assert C.decide(BY_ID["M1"], cells(sc_divmmd=[1, 1, 1], sh_divmmd=[2, 2, 2]))["verdict"] == "inconclusive"


def test_the_headline_level_is_pococks_not_five_percent():
    a, b = [0.0, 1.0, 2.0], [2.45, 3.45, 4.45]       # t = 2.45 / √(2/3) = 3.0006, ν = 4: p ≈ 0.040
    p = st.ttest_ind(b, a, equal_var=False).pvalue
    assert A2 == 0.0294 and A2 < p < 0.05
    assert C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b))["verdict"] == "not reproduced"
    one = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b), looks="one")
    assert one["verdict"] == "reproduced" and one["alpha"] == stats.ALPHA == 0.05


def test_paired_uses_the_per_seed_differences():
    base = [70.0, 74.0, 66.0]                         # the seed's CLIP moves both heads
    a, b = base, [x + d for x, d in zip(base, (1.1, 0.9, 1.0))]
    r = C.decide(BY_ID["F1"], cells("binding_real", globalm_cimr=a, flowclip_cimr=b), looks="one")
    ref = st.ttest_rel(b, a)
    assert r["verdict"] == "reproduced" and r["kind"] == "paired" and r["delta"] == pytest.approx(1.0)
    assert r["p"] == pytest.approx(ref.pvalue) and r["n"] == [3]
    assert stats.welch_test(a, b).p > 0.5              # unpaired, the base's spread would swamp the +1
    gap = C.decide(BY_ID["F1"], cells("binding_real", globalm_cimr=a, flowclip_cimr=[b[0], None, b[2]]), looks="one")
    assert gap["n"] == [2] and gap["delta"] == pytest.approx((1.1 + 1.0) / 2)   # seed 1 has no pair: dropped
    down = C.decide(BY_ID["F3"], cells("aro_shuffle", flowclip_hnb=b, flowclip_cimr=a), looks="one")
    assert down["verdict"] == "reproduced" and down["delta"] == pytest.approx(-1.0)   # a 'decrease' claim


@pytest.mark.parametrize("sh_full_gain,verdict", [(10.0, "reproduced"), (0.5, "reversed"), (3.0, "not reproduced")])
def test_contrast_is_the_interaction(sh_full_gain, verdict):
    """(sh_full − sh_divmmd) − (sc_full − sc_divmmd) with sc_full = sc_divmmd + 4: Δ = gain − 4, SE² = 4 · 1/3,
    ν = (4/3)² / (4 · (1/3)² / 2) = 8."""
    x = [400.0, 401.0, 402.0]
    r = C.decide(BY_ID["M2c"], cells(sc_divmmd=x, sc_full=plus(x, 4), sh_divmmd=plus(x, 10),
                                     sh_full=plus(x, 10 + sh_full_gain)))
    delta, se = sh_full_gain - 4.0, math.sqrt(4 / 3)
    assert r["delta"] == pytest.approx(delta) and r["df"] == pytest.approx(8.0) and r["kind"] == "contrast"
    assert r["p"] == pytest.approx(2 * st.t.sf(abs(delta / se), 8))
    assert r["verdict"] == verdict


def test_one_sample_gaps():
    def sets(full, elements, prefix="single_sem"):
        return {f"{prefix}/full": full, **{f"{prefix}/element{i}": e for i, e in enumerate(elements)}}
    mil = {"mil_divmmd": {0: sets(440, [300, 420, 430, 435]), 1: sets(441, [310, 420, 430, 435]),
                          2: sets(439, [305, 420, 430, 435])}}
    r = C.decide(BY_ID["S1"], mil)
    assert r["verdict"] == "reproduced" and r["kind"] == "one_sample" and r["delta"] == pytest.approx(135.0)
    assert r["p"] == pytest.approx(st.ttest_1samp([140, 131, 134], 0).pvalue)
    sh = {"sh_full": {k: sets(446 + k, [440, 446 + k - g, 441, 442]) for k, g in enumerate((3.0, 2.5, 3.5))}}
    assert C.decide(BY_ID["S3"], sh)["delta"] == pytest.approx(3.0)
    assert C.decide(BY_ID["S3"], sh)["verdict"] == "reproduced"
    below = {"sh_full": {k: sets(440, [445 + g, 430, 431, 432]) for k, g in enumerate((0.0, 1.0, -0.5))}}
    assert C.decide(BY_ID["S3"], below)["verdict"] == "reversed"       # the full set under its best element
    assert C.decide(BY_ID["S3"], below, protocol="source")["verdict"] == "missing"   # only semantic sets here


def _best(sc_full):
    x = [400.0, 401.0, 402.0]
    return cells(sh_full=plus(x, 30), sc_divmmd=x, sh_divmmd=plus(x, 10), sc_full=sc_full)


def test_best_is_an_intersection_union_test():
    r = C.decide(BY_ID["M3"], _best([420.0, 421.0, 422.0]))
    assert r["verdict"] == "reproduced" and [p["vs"] for p in r["parts"]] == ["sc_divmmd", "sh_divmmd", "sc_full"]
    assert [p["delta"] for p in r["parts"]] == pytest.approx([30.0, 20.0, 10.0])
    assert r["delta"] == pytest.approx(10.0) and r["p"] == max(p["p"] for p in r["parts"])   # the weakest part
    close = C.decide(BY_ID["M3"], _best([429.5, 432.5, 430.0]))          # vs sc_full: +0.33, within noise
    assert [p["verdict"] for p in close["parts"]] == ["reproduced", "reproduced", "not reproduced"]
    assert close["verdict"] == "not reproduced"
    above = C.decide(BY_ID["M3"], _best([440.0, 441.0, 442.0]))           # sc_full beats sh_full
    assert [p["verdict"] for p in above["parts"]] == ["reproduced", "reproduced", "reversed"]
    assert above["verdict"] == "reversed"
    gone = C.decide(BY_ID["M3"], {k: v for k, v in _best([420.0, 421.0, 422.0]).items() if k != "sh_divmmd"})
    assert gone["verdict"] == "missing" and gone["missing"] == ["sh_divmmd"]


def _rel_gap_cells(gaps):
    """sc_divmmd with full-set RSUM 400 and four elements averaging 400 · (1 − g/100): rel_gap_mean = g."""
    out = {}
    for k, g in enumerate(gaps):
        e = 400.0 * (1 - g / 100)
        out[k] = {"single_sem/full": 400.0, **{f"single_sem/element{i}": e + d for i, d in enumerate((-1, 1, 0, 0))}}
    return {"sc_divmmd": out}


@pytest.mark.parametrize("gaps,verdict", [([0.1, 0.2, 0.15], "reproduced"), ([5.0, 5.2, 4.9], "reversed"),
                                          ([0.5, 1.5, 0.9], "not reproduced")])
def test_equal_claims_are_tost_against_the_margin(gaps, verdict):
    r = C.decide(BY_ID["S2"], _rel_gap_cells(gaps))
    m, se = np.mean(gaps), np.std(gaps, ddof=1) / math.sqrt(3)
    h = st.t.ppf(1 - A2, 2) * se                       # the (1 − 2α) interval
    assert r["delta"] == pytest.approx(m) and r["ci"] == pytest.approx([m - h, m + h])
    assert r["p"] == pytest.approx(max(st.t.sf((m + 1) / se, 2), st.t.cdf((m - 1) / se, 2)))
    assert r["verdict"] == verdict
    assert (r["p"] < A2) == (verdict == "reproduced")


# ---------------------------------------------------------------- decide: the procedure


def test_two_looks_an_undecided_row_gets_seeds_3_and_4():
    a = [0.0, 1.0, 2.0, 0.5, 1.5]
    b = plus(a, 2.45)                                  # p ≈ 0.040 on seeds 0–2, ≈ 0.001 on 0–4
    assert st.ttest_ind(b, a, equal_var=False).pvalue < A2 < st.ttest_ind(b[:3], a[:3], equal_var=False).pvalue
    r = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b))
    assert r["verdict"] == "reproduced" and r["first_look"] == "not reproduced"
    assert r["seeds"] == [0, 1, 2, 3, 4] and r["n"] == [5, 5] and r["alpha"] == A2
    # a cell without seeds 3–4: no second look
    short = C.decide(BY_ID["M1"], cells(sc_divmmd=a[:3], sh_divmmd=b))
    assert short["verdict"] == "not reproduced" and "first_look" not in short and short["seeds"] == [0, 1, 2]


def test_two_looks_a_row_decided_at_3_seeds_ignores_later_seeds():
    a, b = [400.0, 401.0, 402.0, 500.0, 500.0], [410.0, 411.0, 412.0, 300.0, 300.0]
    r = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b))
    assert r["verdict"] == "reproduced" and r["delta"] == pytest.approx(10.0) and "first_look" not in r
    assert r["seeds"] == [0, 1, 2] and r["n"] == [3, 3]
    one = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b), looks="one")   # every seed, once
    assert one["seeds"] == [0, 1, 2, 3, 4] and one["delta"] == pytest.approx(np.mean(b) - np.mean(a))
    assert "first_look" not in one


def test_two_looks_no_verdict_before_every_cell_has_seeds_0_to_2():
    """A verdict on 2 seeds would be a third, unplanned look: the row stays inconclusive, its test shown as interim."""
    a, b = [400.0, 401.0, 402.0], [410.0, 411.0, 412.0]
    early = C.decide(BY_ID["M1"], cells(sc_divmmd=a[:2], sh_divmmd=b))
    assert early["verdict"] == "inconclusive" and early["interim_verdict"] == "reproduced"
    assert early["interim_seeds"] == 2 and early["delta"] == pytest.approx(10.5) and early["n"] == [2, 3]
    assert C.decide(BY_ID["M1"], cells(sc_divmmd=a[:2], sh_divmmd=b), looks="one")["verdict"] == "reproduced"
    full = C.decide(BY_ID["M1"], cells(sc_divmmd=a, sh_divmmd=b))
    assert full["verdict"] == "reproduced" and "interim_verdict" not in full
    # a row with no test yet (one seed) keeps the plain 'inconclusive'
    assert "interim_verdict" not in C.decide(BY_ID["M1"], cells(sc_divmmd=a[:1], sh_divmmd=b[:1]))


def test_missing_cells_and_missing_values():
    x = [400.0, 401.0, 402.0]
    r = C.decide(BY_ID["M1"], cells(sc_divmmd=x))
    assert r["verdict"] == "missing" and r["missing"] == ["sh_divmmd"] and not r.get("no_value")
    source_only = cells("rsum", sc_divmmd=x, sh_divmmd=plus(x, 10))     # quick-budget records: no semantic RSUM
    r = C.decide(BY_ID["M1"], source_only)
    assert r["verdict"] == "missing" and r["no_value"] and r["missing"] == ["sc_divmmd", "sh_divmmd"]
    assert C.decide(BY_ID["M1"], source_only, protocol="source")["verdict"] == "reproduced"
    best = C.decide(BY_ID["M3"], cells("rsum", sh_full=x, sc_divmmd=x, sh_divmmd=x, sc_full=x))
    assert best["verdict"] == "missing" and best["no_value"]
    # a quantity without retrieval ground truth is read whatever the protocol
    cv = cells("cv_log_image", sc_divmmd=[-3.0, -3.1, -2.9], sh_full=[-1.5, -1.6, -1.4])
    assert C.decide(BY_ID["C1"], cv, protocol="semantic")["verdict"] == "reproduced"


def test_protocol_and_score_pick_the_rsum_they_name():
    per_seed = lambda k, sem, src, mil_sem, mil_src: {  # noqa: E731
        "rsum_sem": sem + k, "rsum": src + k, "retrieval/mil/semantic/rsum": mil_sem + k,
        "retrieval/mil/rsum": mil_src + k}
    data = {"sc_divmmd": {k: per_seed(k, 400, 300, 400, 300) for k in range(3)},
            "sh_divmmd": {k: per_seed(k, 410, 290, 390, 310) for k in range(3)}}
    m1 = BY_ID["M1"]
    assert C.decide(m1, data)["verdict"] == "reproduced"                                 # rsum_sem: +10
    assert C.decide(m1, data, protocol="source")["verdict"] == "reversed"               # rsum: −10
    assert C.decide(m1, data, score="mil")["delta"] == pytest.approx(-10.0)             # semantic MIL
    assert C.decide(m1, data, score="mil", protocol="source")["delta"] == pytest.approx(10.0)
    assert C.decide(m1, data, score="smooth_chamfer")["verdict"] == "missing"           # not evaluated


def test_swap_substitutes_the_knob_cell():
    x = [410.0, 411.0, 412.0]
    data = cells(sh_divmmd=x, sh_full=plus(x, -10), sh_full_b=plus(x, 10), sc_full=x)
    swap = grid.knob_variants()[grid.READING_B_KNOB]
    assert swap == {"sc_full": "sc_full_b", "sh_full": "sh_full_b"}
    assert C.decide(BY_ID["M2b"], data)["verdict"] == "reversed"
    r = C.decide(BY_ID["M2b"], data, swap=swap)
    assert r["verdict"] == "reproduced" and r["cells"] == ["sh_divmmd", "sh_full_b"]
    assert r["delta"] == pytest.approx(10.0)
    r = C.decide(BY_ID["M2a"], {**data, "sc_divmmd": data["sh_divmmd"]}, swap=swap)   # sc_full_b was not run
    assert r["verdict"] == "missing" and r["missing"] == ["sc_full_b"]


def test_a_recipe_knob_retests_only_rows_whose_every_cell_has_its_variant():
    from reproduce.report import knob_applies
    x = [410.0, 411.0, 412.0]
    fn = grid.knob_variants()[grid.FALSE_NEGATIVES_KNOB]
    have = cells(**{n: x for n in ("setdiv_fn", "sh_full_fn", "vse_fn", "pvse_fn", "pvse_maxmatch_fn")})
    applies = {c.id for c in C.CLAIMS if knob_applies(grid.FALSE_NEGATIVES_KNOB, fn, c.cells, have)}
    assert applies == {"B1", "B2", "P1", "S3", "D3", "D4"}   # the rows made of those cells only
    assert not applies & {"M2b", "M3"}      # never sh_full_fn against a default-recipe ablation cell
    without = {k: v for k, v in have.items() if k != "vse_fn"}
    assert not knob_applies(grid.FALSE_NEGATIVES_KNOB, fn, BY_ID["B2"].cells, without)   # vse_fn not run yet
    # a GD/ISD knob changes only the cells with GD/ISD: M2b re-tests sh_full_b against the default sh_divmmd
    b = grid.knob_variants()[grid.READING_B_KNOB]
    assert knob_applies(grid.READING_B_KNOB, b, BY_ID["M2b"].cells, cells(sh_full_b=x))
