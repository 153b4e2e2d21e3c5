"""The collapse rule (docs/reproduction/protocol.md, change list 2026-12-04): a run whose last validation RSUM ends
more than 10 % below its best collapsed, and a comparison with a cell that collapsed in at least half of its tested
seeds is untestable, whatever the test says."""

import pytest

from reproduce import claims as C
from reproduce import curves, report


def _curves(vals, semantic=None):
    val = {"step": list(range(len(vals))), "val/rsum": vals}
    if semantic is not None:
        val["val/semantic/rsum"] = semantic
    return {"val": val}


@pytest.mark.parametrize("vals,hit", [([400.0, 450.0, 406.0], None),             # 9.8 % below: not collapsed
                                      ([400.0, 450.0, 404.0], (450.0, 404.0)),   # 10.2 % below
                                      ([450.0, 300.0, 450.0], None),             # a dip that recovers
                                      ([], None), ([5.0, None, 1.0], (5.0, 1.0))])
def test_collapse_reads_the_best_and_the_last_validation(vals, hit):
    got = curves.collapse(_curves(vals))
    assert got == (None if hit is None else {"best": hit[0], "end": hit[1]})


def test_collapse_reads_the_selection_metric():
    # the semantic RSUM where it was logged (the converged budgets): here it collapsed though the source one did not
    c = _curves([200.0, 210.0, 209.0], semantic=[430.0, 440.0, 280.0])
    assert curves.collapse(c) == {"best": 440.0, "end": 280.0}


def _records(collapsed_seeds):
    """sh_full at 450 and vse at 430 for seeds 0–2 (B2 reproduced by the test); vse collapsed in `collapsed_seeds`."""
    out = []
    for name, value in (("sh_full", 450.0), ("vse", 430.0)):
        for k in range(3):
            end = 280.0 if name == "vse" and k in collapsed_seeds else value + 1.0
            out.append({"name": name, "seed": k, "budget": "converged",
                        "metrics": {"best": {"rsum_sem": value + k, "rsum": value - 100 + k}},
                        "curves": _curves([value - 1.0], semantic=[value + 1.0, end])})
    return out


@pytest.mark.parametrize("collapsed_seeds,verdict", [((), "reproduced"), ((1,), "reproduced"),
                                                     ((0, 2), "untestable"), ((0, 1, 2), "untestable")])
def test_a_comparison_with_a_cell_collapsed_in_half_its_seeds_is_untestable(collapsed_seeds, verdict):
    records = _records(collapsed_seeds)
    cells, collapsed = report.seed_metrics(records), report.collapsed_runs(records)
    assert set(collapsed.get("vse", {})) == set(collapsed_seeds) and "sh_full" not in collapsed
    b2 = next(c for c in C.CLAIMS if c.id == "B2")
    tested = C.decide(b2, cells)
    assert tested["verdict"] == "reproduced" and tested["delta"] == pytest.approx(20.0)
    row = report.claim_rows(cells, [b2], looks="two", protocol="semantic", collapsed=collapsed)[0]
    assert row["result"]["verdict"] == verdict
    assert row["result"]["delta"] == pytest.approx(20.0)          # the test's numbers stay in the row
    if verdict == "untestable":
        assert row["result"]["tested_verdict"] == "reproduced"
        assert row["result"]["collapsed"] == {"vse": [[k, 431.0, 280.0] for k in collapsed_seeds]}
        why = report._why(row, {})
        assert why.startswith("collapsed: vse seed %d (val RSUM 431 → 280)" % collapsed_seeds[0])
        assert "the test alone says Δ +20.00, reproduced" in why
        assert set(row["scores"].values()) <= {"untestable", "missing"}   # every score reads the same runs


def test_missing_stays_missing():
    b1 = next(c for c in C.CLAIMS if c.id == "B1")          # setdiv never ran here
    records = _records((0, 1, 2))
    row = report.claim_rows(report.seed_metrics(records), [b1], looks="two", protocol="semantic",
                            collapsed=report.collapsed_runs(records))[0]
    assert row["result"]["verdict"] == "missing" and row["result"]["missing"] == ["setdiv"]


def test_a_knob_that_leaves_the_collapsed_runs_as_they_were_does_not_list_them_again():
    runs = {"vse": [[0, 431.0, 280.0], [2, 429.0, 267.0]]}
    row = {"id": "B2", "result": {"verdict": "untestable", "delta": 20.0, "tested_verdict": "reproduced",
                                  "collapsed": runs},
           "knobs": [{"knob": "loss.a=1", "verdict": "untestable", "delta": 21.0, "tested_verdict": "reproduced",
                      "collapsed": {"vse": [[0, 431.0, 280.0], [2, 429.0, 267.0]]}},
                     {"knob": "loss.b=2", "verdict": "untestable", "delta": 5.0, "tested_verdict": "inconclusive",
                      "collapsed": {"vse_b": [[1, 400.0, 300.0]]}}]}
    why = report._why(row, {})
    assert why.count("vse seed 0 (val RSUM 431 → 280)") == 1, why
    assert "`loss.a=1`: Δ +21.00, untestable (the same collapsed runs; the test alone: reproduced)" in why, why
    assert "`loss.b=2`: Δ +5.00, untestable (collapsed: vse_b seed 1 (val RSUM 400 → 300); the test alone: " \
           "inconclusive)" in why, why
