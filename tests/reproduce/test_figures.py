"""What the report's figures show (`reproduce.figures`), read off the matplotlib objects before they are saved: bar
charts zoomed to the differences the claims are about (not from 0), value labels above the error bars, legends
(not colour names in titles); heat maps of all cells on one labelled colour scale with the cell in the title;
training curves with validation points and the warm-up → hardest-negative switch marked; the claims forest with a
key to its colours and markers."""

import os

import numpy as np
import pytest

from mmjax.evaluation import plots
from reproduce import figures
from reproduce.claims import Claim


@pytest.fixture
def drawn(monkeypatch):
    """{file name: figure} of every figure saved through `figures._save` or `plots._save` (closed, readable)."""
    kept = {}

    def keeper(save):
        def keep(fig, path):
            kept[os.path.basename(str(path))] = fig
            return save(fig, path)
        return keep
    monkeypatch.setattr(figures, "_save", keeper(figures._save))
    monkeypatch.setattr(plots, "_save", keeper(plots._save))
    return kept


def _stat(mean, std=1.0):
    return {"mean": mean, "std": std, "n": 3, "values": [mean - std, mean, mean + std]}


def _cell(label, group, **metrics):
    return {"label": label, "group": group, "n_seeds": 3,
            "metrics": {w: {k: _stat(*v) if isinstance(v, tuple) else _stat(v) for k, v in metrics.items()}
                        for w in ("best", "final")}}


RETRIEVAL = {"sc_divmmd": _cell("smooth-Chamfer, Div+MMD", "ablation", rsum=(402.0, 3.0)),
             "sh_divmmd": _cell("S_H, Div+MMD", "ablation", rsum=(431.0, 2.0)),
             "pvse": _cell("PVSE (MIL)", "baselines", rsum=(389.0, 6.0)),
             "sh_full_hinge": _cell("S_H, hinge", "knobs", rsum=(420.0, 0.0))}
FLOWCLIP = {n: _cell(n, "flowclip", binding_real=(72.0 + i, 1.5), binding_chance=(50.0, 0.0),
                     aro_real=(48.0, 1.0), aro_shuffle=(37.0 - i, 0.5), aro_fixed=(38.0, 2.5),
                     aro_chance=(40.0, 0.0))
            for i, n in enumerate(("clip", "globalm_hnb", "flowclip_cimr"))}


def _value_labels(ax):
    return [t for t in ax.texts if t.get_text().replace(".", "", 1).isdigit()]


@pytest.mark.parametrize("means,stds,refs,lo_range,ref_shown", [
    ([402.0, 431.0, 389.0], [3.0, 2.0, 6.0], (), (300.0, 383.0), None),    # RSUM ~400: the axis starts near the data
    ([72.0, 73.0], [1.5, 1.5], (50.0,), (60.0, 70.5), False),             # chance far below: left out of the range
    ([48.0, 37.0], [1.0, 0.5], (40.0,), (20.0, 36.5), True),              # chance among the bars: inside the range
    ([48.0, 47.0], [1.0, 0.5], (44.0,), (20.0, 44.0), True),              # chance just below: inside the range
    ([1.0, 2.0], [0.5, 0.5], (), (0.0, 0.0), None)])                       # near 0: from 0, never below it
def test_zoomed_ylim(means, stds, refs, lo_range, ref_shown):
    lo, hi = figures.zoomed_ylim(means, stds, refs)
    assert lo_range[0] <= lo <= lo_range[1]
    assert hi > max(m + s for m, s in zip(means, stds))               # room for the labels above the caps
    for r in refs:
        assert (lo <= r <= hi) == ref_shown
    assert figures.zoomed_ylim([np.nan], [0.0]) is None


def test_ablation_bars_show_the_gaps_with_labels_above_the_error_bars_and_a_legend(tmp_path, drawn):
    figures.ablation_rsum(RETRIEVAL, str(tmp_path / "ablation_rsum.png"))
    ax = drawn["ablation_rsum.png"].axes[0]
    lo, hi = ax.get_ylim()
    assert 0 < lo < 389.0 - 6.0 and hi > 431.0 + 2.0     # not from 0 when the gaps are 10–30 RSUM
    assert f"axis from {lo:g}, not 0" in ax.get_ylabel()
    labels = _value_labels(ax)
    assert [t.get_text() for t in labels] == ["402.0", "431.0", "389.0", "420.0"]
    for t, (m, s) in zip(labels, [(402.0, 3.0), (431.0, 2.0), (389.0, 6.0), (420.0, 0.0)]):
        assert t.xy[1] == pytest.approx(m + s) and t.get_va() == "bottom"   # above the cap, clear of the bar
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["MaxMatch ablation", "baselines",
                                                                  "other defaults"]
    assert "blue" not in ax.get_title() and "(gray)" not in ax.get_title()


def test_flowclip_bars_zoom_in_and_say_where_chance_is(tmp_path, drawn):
    figures.flowclip_binding(FLOWCLIP, str(tmp_path / "flowclip_binding.png"))
    ax = drawn["flowclip_binding.png"].axes[0]
    assert ax.get_ylim()[0] > 50.0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["chance 50% (below the axis)"]
    assert [t.xy[1] for t in _value_labels(ax)] == pytest.approx([73.5, 74.5, 75.5])
    figures.flowclip_controls(FLOWCLIP, str(tmp_path / "flowclip_controls.png"))
    ax = drawn["flowclip_controls.png"].axes[0]
    lo, hi = ax.get_ylim()
    assert 0 < lo <= 34.0 and hi > 49.0                    # chance (40) lies among the bars: kept in view
    assert len(_value_labels(ax)) == 9
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["chance 40%", "Real", "Shuffle", "Fixed"]


def test_heatmaps_share_one_labelled_colour_scale_and_name_their_cell(tmp_path, drawn):
    agg = {"pvse": {"label": "PVSE (MIL)", "matrix": [[0.61, 0.61], [0.62, 0.62]]},
           "sh_full": {"label": "S_H, Div+MMD+GD+ISD (MaxMatch)", "matrix": [[0.1, 0.66], [0.6, 0.04]]},
           "vse": {"label": "VSE∞", "matrix": None}}
    paths = figures.draw_heatmaps(agg, str(tmp_path))
    assert paths == {n: os.path.join("figures", f"heatmap_{n}.png") for n in ("pvse", "sh_full")}
    for name in paths:
        fig = drawn[f"heatmap_{name}.png"]
        ax = fig.axes[0]
        assert agg[name]["label"] in ax.get_title()
        assert ax.images[0].get_clim() == pytest.approx((0.04, 0.66))   # the same scale for every cell
        cbar = [a for a in fig.axes if a.get_label() == "<colorbar>"]
        assert len(cbar) == 1 and "one scale for all 2 cells" in cbar[0].get_ylabel()
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]


def _curves(weights):
    return {"train": {"step": [20, 40, 60, 80], "loss/triplet": [0.3, 0.2, 0.4, 0.4],
                      "loss/all_negative_weight": weights},
            "val": {"step": [40, 80], "val/rsum": [300.0, 310.0]}}


def test_training_curves_mark_the_switch_and_draw_validation_as_points(tmp_path, drawn):
    agg = {"sh_full": {**RETRIEVAL["sh_divmmd"], "curves": [_curves([1.0, 1.0, 0.5, 0.0]), {}, None]}}
    figures.training_curves(agg, str(tmp_path / "training_curves.png"))
    ax_loss, ax_val = drawn["training_curves.png"].axes[:2]
    assert ax_loss.get_ylabel() == "triplet loss" and "triplet loss" in ax_loss.get_title()
    for ax in (ax_loss, ax_val):
        assert any(abs(p.get_x() - 40) < 1e-9 and abs(p.get_x() + p.get_width() - 80) < 1e-9 for p in ax.patches)
        assert any(t.get_text() == "warm-up → hardest negative" for t in ax.texts)
    (val,) = [line for line in ax_val.lines if line.get_label().startswith("S_H")]
    assert val.get_marker() == "o" and val.get_linestyle() == ":"
    assert ax_loss.get_xlim() == ax_val.get_xlim()         # one step axis per row
    assert figures._ramp([{"curves": [_curves([1.0, 1.0, 1.0, 1.0])]}]) is None


def test_claims_forest_has_a_key_for_colours_and_markers(tmp_path, drawn):
    def row(cid, quantity, delta, verdict, source, margin=None):
        claim = Claim(cid, "maxmatch", "t", "q", "welch", ("a", "b"), quantity, "increase", "s", source, margin)
        return {"claim": claim, "result": {"delta": delta, "ci": (delta - 1, delta + 1), "verdict": verdict}}
    rows = [row("M1", "rsum", 10.0, "reproduced", 2.0), row("S2", "rel_gap_mean", 0.1, "reproduced", None, 1.0),
            row("P1", "cv_image", -5.0, "reversed", 3.0)]
    figures.claims_forest(rows, str(tmp_path / "claims.png"))
    fig = drawn["claims.png"]
    key = [t.get_text() for t in fig.legends[0].get_texts()]
    assert key == ["measured Δ, reproduced", "measured Δ, reversed", "the source's Δ", "equivalence margin",
                   "Δ = 0"]
    assert [ax.get_xlabel().replace("\n", " ") for ax in fig.axes] == [   # each panel names its quantity
        "RSUM", "(full − mean single element) / full, %", "mean ln CV, image elements"]
