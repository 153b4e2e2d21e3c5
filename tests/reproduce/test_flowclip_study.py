"""The Flow-CLIP study's gates, pilot budget and verdicts (`reproduce.flowclip_study`) on hand-made records, against
scipy's paired and one-sample t-tests and the rules of docs/reproduction/flowclip_protocol.md."""

import numpy as np
import pytest
from scipy import stats as st

from reproduce import flowclip_report
from reproduce import flowclip_study as FS
from reproduce import grid, report
from tests.reproduce.helpers import assert_tables_are_rectangular

SEEDS = range(5)
NOISE = (0.3, -0.2, 0.1, -0.4, 0.2)


def _base(colour=(90.0, 20.0), shape=(80.0, 20.0), cell=(60.0, 15.0), grounding=(40.0, 15.0)):
    m = {}
    for label, (acc, maj) in (("colour", colour), ("shape", shape), ("size", (70.0, 50.0)), ("cell", cell),
                              ("on_object", (90.0, 60.0))):
        m.update({f"probe/{label}/accuracy": acc, f"probe/{label}/majority": maj, f"probe/{label}/shuffled": maj})
    m.update({"grounding/accuracy": grounding[0], "grounding/chance_area": grounding[1],
              "grounding/chance_uniform": 10.0})
    return m


def _head(k, *, binding=70.0, relation=60.0, real=80.0, shuffle=70.0, fixed=68.0, blind=None, holdout=60.0):
    """One head seed's metrics: every control suite at (real, shuffle, fixed), chance 50 (order 20)."""
    blind = blind or {"binding": 62.0}
    m = {"binding_real": binding + NOISE[k], "blind/holdout_pair_accuracy": holdout}
    for s in FS.CONTROL_SUITES:
        chance = 20.0 if s == "order" else 50.0
        m.update({f"suite/{s}/real": real + NOISE[k], f"suite/{s}/shuffle": shuffle + NOISE[k],
                  f"suite/{s}/fixed": fixed - NOISE[k], f"suite/{s}/chance": chance,
                  f"suite/{s}/blind": blind.get(s, chance + 1.0)})
    m["suite/relation/real"] = relation + NOISE[k]
    return m


def _record(name, seed, metrics, budget="flowclip", curves=None, epochs=5):
    return {"budget": budget, "name": name, "seed": seed, "metrics": {"best": metrics, "final": metrics},
            "budget_detail": {"num_epochs": epochs}, **({"curves": curves} if curves else {})}


def _study(base_kw=None, heads=None):
    recs = [_record(f"fcs_base_{b}", 0, _base(**(base_kw or {}))) for b in FS.BASES]
    for b in FS.BASES:
        for h in FS.HEADS:
            kw = (heads or {}).get(h, {})
            recs += [_record(FS.head_cell(b, h), k, _head(k, **kw)) for k in SEEDS]
    return report.by_budget(recs)


def test_plateau_epoch_is_the_first_epoch_no_later_validation_beats_by_more_than_half_a_point():
    steps = [25 * i for i in range(1, 21)]          # 4 validations per epoch of 100 steps, 5 epochs
    rising = [50 + 2 * i for i in range(20)]
    flat_after_2 = [50 + 4 * min(i, 7) + 0.3 * (i % 2) for i in range(20)]
    assert FS.plateau_epoch(steps, rising, 100) == 5
    assert FS.plateau_epoch(steps, flat_after_2, 100) == 2
    assert FS.plateau_epoch(steps, [60.0] * 20, 100) == 1
    # brute force on a noisy curve: the rule, epoch by epoch
    v = list(np.random.default_rng(0).normal(60, 1, 20))
    ref = next((e for e in range(1, 6) if max(v[4 * e:] or [-1e9]) - max(v[:4 * e]) <= 0.5), 5)
    assert FS.plateau_epoch(steps, v, 100) == ref


def test_the_pilot_sets_the_budget_only_when_both_declared_heads_ran():
    """Protocol change list 2026-12-02: the pilot trains flowclip_hnb and flowclip_cimr; E is the larger of their
    plateau epochs, and a Global-M record (none is run) does not change it."""
    steps = [25 * i for i in range(1, 21)]
    fast = {"val": {"step": steps, FS.SELECT_BINDING_VAL: [50 + 4 * min(i, 7) for i in range(20)]}}   # plateau 2
    slow = {"val": {"step": steps, FS.SELECT_BINDING_VAL: [50 + 4 * min(i, 11) for i in range(20)]}}  # plateau 3
    hnb = _record(FS.head_cell("R", "flowclip_hnb"), 0, {}, "flowclip_pilot", fast)
    cimr = _record(FS.head_cell("R", "flowclip_cimr"), 0, {}, "flowclip_pilot", slow)
    globalm = _record(FS.head_cell("R", "globalm_hnb"), 0, {}, "flowclip_pilot",
                      {"val": {"step": steps, FS.SELECT_BINDING_VAL: [50 + 2 * i for i in range(20)]}})
    assert FS.PILOT_HEADS == ("flowclip_hnb", "flowclip_cimr")
    assert FS.pilot([hnb])["epochs"] is None
    assert FS.pilot([hnb, globalm])["epochs"] is None
    p = FS.pilot([hnb, cimr])
    assert p["epochs"] == 3 and p["heads"]["flowclip_hnb"]["epoch"] == 2 and p["heads"]["flowclip_cimr"]["best"] == 94.0
    assert FS.pilot([hnb, cimr, globalm])["epochs"] == 3


def test_gates_follow_the_declared_margins():
    study = FS.build(_study())
    g = study["gates"]["P"]
    assert g["binding"] and g["relation"] and g["prior_suites"] == ["binding"]
    weak = FS.build(_study(base_kw={"colour": (35.0, 20.0), "cell": (30.0, 15.0)}))["gates"]["R"]
    assert not weak["binding"] and not weak["relation"]
    no_cell = FS.build(_study(base_kw={"cell": (34.0, 15.0)}))["gates"]["P"]
    assert no_cell["binding"] and not no_cell["relation"]
    unsure = FS.build(_study(heads={h: {"holdout": 54.0} for h in FS.HEADS}))["gates"]["P"]
    assert unsure["prior_suites"] == []      # a blind model that does not generalise bears no prior


def _row(study, rid, base="R"):
    return next(r for r in study["rows"] if r["id"] == rid and r["base"] == base)["result"]


def test_gain_rows_against_scipy_and_the_declared_size():
    study = FS.build(_study(heads={"flowclip_cimr": {"binding": 73.0, "relation": 61.0},
                                   "flowclip_hnb": {"binding": 73.0}}))
    fb1 = _row(study, "FB1")
    # the same noise on both sides: the differences have zero spread, so no test — but Δ̄ is still shown
    assert fb1["verdict"] == "inconclusive" and fb1["delta"] == pytest.approx(3.0)
    a = [70.0 + n for n in NOISE]
    recs = _study(heads={"flowclip_cimr": {"binding": 73.0, "relation": 61.0}})
    for r in recs["flowclip"]:
        if r["name"] == "fcs_R_flowclip_cimr":
            r["metrics"]["best"]["binding_real"] += 0.5 * (-1) ** r["seed"]
            r["metrics"]["best"]["suite/relation/real"] += 0.5 * (-1) ** r["seed"]
    study = FS.build(recs)
    fb1, fr1 = _row(study, "FB1"), _row(study, "FR1")
    b = [73.0 + n + 0.5 * (-1) ** k for k, n in enumerate(NOISE)]
    ref = st.ttest_rel(b, a)
    assert fb1["delta"] == pytest.approx(np.mean(np.subtract(b, a)))
    assert fb1["t"] == pytest.approx(ref.statistic) and fb1["p"] == pytest.approx(ref.pvalue)
    assert fb1["df"] == 4 and fb1["verdict"] == "reproduced"
    # FR1: a significant +1 gain is real but below the declared +2: not reproduced, and says why
    assert fr1["verdict"] == "not reproduced" and "below the declared +2" in fr1["why"]


def test_untestable_rows_name_the_measured_reason():
    study = FS.build(_study(base_kw={"colour": (35.0, 20.0)}, heads={h: {"holdout": 50.0} for h in FS.HEADS}))
    fb1, fc1 = _row(study, "FB1"), _row(study, "FC1")
    assert fb1["verdict"] == "untestable" and "colour probe 35.0 vs majority 20.0" in fb1["why"]
    assert fc1["verdict"] == "untestable" and "held-out pair accuracy 50.0 %" in fc1["why"]


def test_rows_whose_gate_is_not_measured_yet_are_missing_not_untestable():
    recs = _study()
    recs["flowclip"] = [r for r in recs["flowclip"]
                        if r["name"] != "fcs_base_P" and not (r["name"].startswith("fcs_R_"))]
    study = FS.build(recs)
    fb1_p, fc1_r = _row(study, "FB1", "P"), _row(study, "FC1", "R")
    assert fb1_p["verdict"] == "missing" and fb1_p["why"] == "the base has not run"
    assert fc1_r["verdict"] == "missing" and fc1_r["why"].startswith("its heads have not run yet")
    assert _row(study, "FB1", "R")["verdict"] == "missing"      # R's base ran, its heads did not


def test_cimr_rows_remove_half_the_excess_and_keep_real():
    # HNB Shuffle 70 (excess 20 over chance 50); CIMR 55 removes 15 ≥ 10: reproduced; CIMR 65 removes 5: reversed
    def study(cimr_shuffle):
        recs = _study(heads={"flowclip_hnb": {"shuffle": 70.0}, "flowclip_cimr": {"shuffle": cimr_shuffle}})
        for r in recs["flowclip"]:
            if r["name"].endswith("flowclip_cimr"):
                r["metrics"]["best"]["suite/binding/shuffle"] += 0.5 * (-1) ** r["seed"]
                r["metrics"]["best"]["suite/binding/real"] += 0.2 * (-1) ** r["seed"]
        return FS.build(recs)
    good, bad = _row(study(55.0), "FC1"), _row(study(65.0), "FC1")
    d = [(70.0 + n) - (55.0 + n + 0.5 * (-1) ** k) - 0.5 * (70.0 + n - 50.0) for k, n in enumerate(NOISE)]
    ref = st.ttest_1samp(d, 0.0)
    assert good["delta"] == pytest.approx(np.mean(d)) and good["p"] == pytest.approx(ref.pvalue)
    assert good["verdict"] == "reproduced" and bad["verdict"] == "reversed"
    kept = _row(study(55.0), "FC3")   # Real differs by ±0.2 around 0: inside ±1 at 90 %
    assert kept["verdict"] == "reproduced" and kept["ci"][0] > -1 and kept["ci"][1] < 1 and kept["p"] < 0.05


def test_missing_heads_and_the_report_section():
    recs = _study()
    recs["flowclip"] = [r for r in recs["flowclip"] if r["name"] != "fcs_P_flowclip_cimr"]
    study = FS.build(recs)
    assert _row(study, "FB1", "P")["verdict"] == "missing" and "fcs_P_flowclip_cimr" in _row(study, "FB1", "P")["why"]
    lines = flowclip_report.section(study, report.tables.markdown_table)
    text = "\n".join(lines)
    assert "**Gate 1" in text and "**Gate 2" in text and "| FB1 | P |" in text
    assert_tables_are_rectangular(text)
    assert FS.build({}) is None
    assert "No records yet" in "\n".join(flowclip_report.section(None, report.tables.markdown_table))


def test_the_grid_has_the_study_cells_on_one_base_seed(monkeypatch):
    cells = grid.make_grid(5, ["fcs_R_flowclip_cimr"])
    assert [(c.name, c.seed) for c in cells][:2] == [("fcs_base_R", 0), ("fcs_R_flowclip_cimr", 0)]
    assert {grid.clip_of(c).seed for c in cells if c.spec.needs_clip} == {0}
    assert not any(c.spec.group == "fcstudy" for c in grid.make_grid(1))
    # One seed at a time (a pool of processes, reproduce.parallel): the heads of seed k > 0 still bring the base's
    # seed 0, so its archived export is restored into their directory (a lent GPU's run failed without it).
    later = grid.make_grid(1, ["fcs_P_flowclip_hnb", "fcs_P_flowclip_cimr"], first_seed=3)
    assert [(c.name, c.seed) for c in later] == [("fcs_base_P", 0), ("fcs_P_flowclip_hnb", 3),
                                                  ("fcs_P_flowclip_cimr", 3)]
    assert [c.name for c in grid.make_grid(1, ["fcs_P_flowclip_hnb"], with_clip=False, first_seed=3)] == [
        "fcs_P_flowclip_hnb"]
    cfg = grid.build_config(cells[-1], "flowclip_pilot", "/tmp/out")
    assert cfg.train.select_metric == "shapesworld_suites/binding_mean/real" and cfg.train.num_epochs == 5
    assert cfg.data.clip_workdir.endswith("cells/fcs_base_R/seed0")
    assert grid.build_config(cells[0], "flowclip_pilot", "/tmp/out").data.language_prior == grid.FCSTUDY_PRIOR
    # The pilot fixed E (the protocol's change list, 2026-12-03); the study budget trains exactly E epochs.
    assert grid.build_config(cells[-1], "flowclip", "/tmp/out").train.num_epochs == grid.FLOWCLIP_HEAD_EPOCHS == 5
    monkeypatch.setattr(grid, "FLOWCLIP_HEAD_EPOCHS", None)
    with pytest.raises(ValueError, match="set by its pilot"):
        grid.build_config(cells[-1], "flowclip", "/tmp/out")
    with pytest.raises(ValueError, match="does not run at the 'default' budget"):
        grid.build_config(cells[-1], "default", "/tmp/out")


def _curve(values, per_epoch=100, per_validation=25):
    return {"val": {"step": [per_validation * (i + 1) for i in range(len(values))], FS.SELECT_BINDING_VAL: values}}


def test_heads_still_rising_at_the_budget_are_flagged_with_their_late_rise():
    """Protocol: 'a head whose best falls in its last epoch is flagged "still rising"'; the late rise is the last
    epoch's best minus the best before it (brute force on the planted curves)."""
    rising = [50 + i for i in range(20)]                                  # best at the end: +4 in the last epoch
    flat = [50 + 4 * min(i, 7) for i in range(20)]                        # plateau from epoch 2 (first best kept)
    late_dip = [50 + 4 * min(i, 7) for i in range(16)] + [70, 70, 79.5, 60]  # best in the last epoch, then a dip
    recs = [_record(FS.head_cell("G", "globalm_hnb"), k, {}, curves=_curve(v)) for k, v in enumerate((rising, flat))]
    recs.append(_record(FS.head_cell("G", "flowclip_hnb"), 0, {}, curves=_curve(late_dip)))
    recs.append(_record("fcs_base_G", 0, {}, curves=_curve(rising)))      # a base is not a head
    r, f, d = (FS.late_rise(x) for x in recs[:3])
    assert r["still_rising"] and r["late_rise"] == pytest.approx(69 - 65) and r["best_epoch"] == pytest.approx(5.0)
    assert not f["still_rising"] and f["late_rise"] == pytest.approx(0.0) and f["best_epoch"] == pytest.approx(2.0)
    assert d["still_rising"] and d["late_rise"] == pytest.approx(79.5 - 78) and d["best_epoch"] == pytest.approx(4.75)
    hb = FS.head_budgets(recs)
    assert set(hb) == {"fcs_G_globalm_hnb", "fcs_G_flowclip_hnb"}
    assert hb["fcs_G_globalm_hnb"]["still_rising"] == 1 and hb["fcs_G_globalm_hnb"]["seeds"] == 2
    assert hb["fcs_G_globalm_hnb"]["late_rise"] == pytest.approx(2.0) and hb["fcs_G_globalm_hnb"]["late_rise_max"] == 4
    assert FS.late_rise(_record("x", 0, {})) is None
    text = "\n".join(flowclip_report.section({**FS.build(_study()), "head_budgets": hb}, report.tables.markdown_table))
    assert "| fcs_G_globalm_hnb | 5 | 2 | 3.50 | 1 of 2 | +2.00 | +4.00 |" in text
    assert_tables_are_rectangular(text)


def test_cimr_rows_show_the_direction_and_keep_their_quantity_at_one_seed():
    recs = _study(heads={"flowclip_hnb": {"shuffle": 70.0}, "flowclip_cimr": {"shuffle": 75.0}})
    fc1 = _row(FS.build(recs), "FC1")
    # CIMR raised Shuffle by 5 (the noise cancels in the pairs); d = −5 − ½ · 20 = −15 on every seed
    assert fc1["moved"]["delta"] == pytest.approx(5.0) and fc1["delta"] == pytest.approx(-15.0)
    assert "Shuffle accuracy 70.0 → 75.0 (CIMR − HNB +5.00" in fc1["why"] and "excess over chance +20.0" in fc1["why"]
    recs["flowclip"] = [r for r in recs["flowclip"] if r["seed"] == 0]
    one = _row(FS.build(recs), "FC1")
    assert one["verdict"] == "inconclusive" and one["delta"] == pytest.approx(-15.0 - 0.5 * NOISE[0])  # d, not +5


def test_binding_rows_are_retested_against_global_m_trained_2e_epochs():
    """Protocol change list, 2026-12-05: the gain rows on G re-tested with the Global-M heads at 2E epochs; the
    declared verdict stays, the re-test joins 'why'."""
    recs = _study(heads={"flowclip_cimr": {"binding": 73.0}, "flowclip_hnb": {"binding": 73.0}})
    for r in [r for r in recs["flowclip"] if r["name"] == "fcs_G_globalm_hnb"]:
        m = dict(r["metrics"]["best"], binding_real=r["metrics"]["best"]["binding_real"] + 2.5 + 0.1 * r["seed"])
        recs["flowclip"].append({**r, "name": "fcs_G_globalm_hnb" + grid.FCSTUDY_2E_SUFFIX,
                                 "metrics": {"best": m, "final": m}})
    study = FS.build(recs)
    fb2, fb1 = _row(study, "FB2", "G"), _row(study, "FB1", "G")
    assert fb2["verdict"] == "inconclusive" and "retest_2e" in fb2 and "retest_2e" not in fb1
    d = [3.0 - 2.5 - 0.1 * k for k in SEEDS]
    ref = st.ttest_1samp(d, 0.0)
    again = fb2["retest_2e"]
    assert again["delta"] == pytest.approx(np.mean(d)) and again["p"] == pytest.approx(ref.pvalue)
    assert again["verdict"] == "not reproduced" and fb2["why"].startswith("Global-M at 2E epochs: Δ̄ +0.30")
    assert "retest_2e" not in _row(study, "FB2", "R")


def test_the_2e_global_m_cells_train_twice_the_study_epochs_at_the_study_budget_only():
    cells = grid.make_grid(1, ["fcs_G_globalm_hnb_2e", "fcs_G_globalm_cimr_2e"])
    assert [c.name for c in cells] == ["fcs_base_G", "fcs_G_globalm_hnb_2e", "fcs_G_globalm_cimr_2e"]
    cfg = grid.build_config(cells[1], "flowclip", "/tmp/out")
    ref = grid.build_config(grid.Cell(grid.SPEC_BY_NAME["fcs_G_globalm_hnb"], 0), "flowclip", "/tmp/out")
    assert cfg.train.num_epochs == 2 * grid.FLOWCLIP_HEAD_EPOCHS == 2 * ref.train.num_epochs
    # nothing else differs from the head it re-trains
    a, b = cfg.to_dict(), ref.to_dict()
    a["train"].pop("num_epochs"), b["train"].pop("num_epochs")
    assert a == b
    with pytest.raises(ValueError, match="at the 'flowclip' budget only"):
        grid.build_config(cells[1], "flowclip_pilot", "/tmp/out")


def test_the_study_figure_draws_every_seed_and_names_its_reference_lines(monkeypatch, tmp_path):
    from reproduce import figures, flowclip_figures
    kept = {}
    monkeypatch.setattr(flowclip_figures, "_save", lambda fig, path: kept.setdefault("fig", fig) and path)
    recs = _study(heads={"flowclip_hnb": {"binding": 80.0}, "flowclip_cimr": {"binding": 81.0}})
    recs["flowclip"] = [r for r in recs["flowclip"] if not r["name"].startswith(("fcs_P_", "fcs_R_"))]
    study = FS.build(recs)
    cells = report.seed_metrics(recs["flowclip"])
    path = flowclip_figures.study_figure(study, cells, str(tmp_path / "f.png"))
    assert path.endswith("f.png")
    fig = kept["fig"]
    assert len(fig.axes) == 2                                   # only base G has heads
    gain, ctl = fig.axes
    # every seed of the four heads is a dot; the pairs are joined per seed (5 seeds × 2 losses)
    from matplotlib.collections import PathCollection
    assert sum(len(c.get_offsets()) for c in gain.collections if isinstance(c, PathCollection)) == 4 * len(SEEDS)
    assert len([ln for ln in gain.lines if ln.get_color() == "0.6"]) == 2 * len(SEEDS)
    labels = [t.get_text() for t in ctl.get_legend().get_texts()]
    assert any(t.startswith("chance (suite mean) 50.0 %") for t in labels)
    assert any(t.startswith("blind text-only model 62.0 %") for t in labels)
    # the zoom keeps every dot visible
    lo, hi = gain.get_ylim()
    assert lo <= 70.0 - 0.4 and hi >= 81.0 + 0.3
    assert "binding gain rows (FB1, FB2)" in gain.get_title()
    assert flowclip_figures.study_figure(None, {}, str(tmp_path / "g.png")) is None
    assert "flowclip_study.png" in figures.__doc__


def test_the_study_figure_marks_a_base_whose_binding_rows_are_untestable(monkeypatch, tmp_path):
    from reproduce import flowclip_figures
    kept = {}
    monkeypatch.setattr(flowclip_figures, "_save", lambda fig, path: kept.setdefault("fig", fig) and path)
    recs = _study(base_kw={"colour": (35.0, 20.0)})              # gate 1 fails on every base
    recs["flowclip"] = [r for r in recs["flowclip"] if not r["name"].startswith(("fcs_P_", "fcs_R_"))]
    study = FS.build(recs)
    assert not study["gates"]["G"]["binding"]
    flowclip_figures.study_figure(study, report.seed_metrics(recs["flowclip"]), str(tmp_path / "f.png"))
    title = kept["fig"].axes[0].get_title()
    assert "untestable" in title and "gain rows" not in title


def test_a_row_is_decided_once_on_the_declared_five_pairs():
    """Protocol: one look at seeds 0–4. Fewer pairs show their test as interim under 'inconclusive'; a sixth seed
    (e.g. a re-run) is not part of the look."""
    recs = _study(heads={"flowclip_hnb": {"binding": 73.0}})
    for r in recs["flowclip"]:
        if r["name"] == "fcs_R_flowclip_hnb":
            r["metrics"]["best"]["binding_real"] += 0.5 * (-1) ** r["seed"]
    full = _row(FS.build(recs), "FB2")
    assert full["verdict"] == "reproduced" and full["seeds"] == list(SEEDS) and "interim_verdict" not in full
    extra = [dict(r, seed=5) for r in recs["flowclip"] if r["seed"] == 0 and r["name"].startswith("fcs_R_")]
    for r in extra:   # a sixth pair that would flip the test if it counted
        m = dict(r["metrics"]["best"], binding_real=0.0 if "flowclip" in r["name"] else 100.0)
        r["metrics"] = {"best": m, "final": m}
    with_sixth = _row(FS.build({"flowclip": recs["flowclip"] + extra}), "FB2")
    assert with_sixth["seeds"] == list(SEEDS) and with_sixth["p"] == pytest.approx(full["p"])
    early = {"flowclip": [r for r in recs["flowclip"] if r["seed"] < 2]}
    two = _row(FS.build(early), "FB2")
    a = [70.0 + n for n in NOISE[:2]]
    b = [73.0 + n + 0.5 * (-1) ** k for k, n in enumerate(NOISE[:2])]
    assert two["p"] == pytest.approx(st.ttest_rel(b, a).pvalue)
    assert two["verdict"] == "inconclusive" and two["interim_verdict"] in ("reproduced", "not reproduced")
    assert two["why"].startswith(f"interim, 2 of 5 pairs: the test says {two['interim_verdict']}")
