"""Training curves in cell records (`reproduce.curves`): what a record keeps of metrics.jsonl (losses, validation
RSUM and its semantic form), their backfill for old records, the largest validation drop, and the report's
training-curves figure and stability column."""

import json
import os
import warnings

import pytest

from reproduce import archive, curves, figures, grid, report, runner, tables
from tests.reproduce.helpers import PNG, converged_metrics, record, section, table_row


def _write_metrics(workdir, rows):
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


ROWS = [{"step": 2, "time": 1.0, "loss/total": 3.0, "loss/triplet": 0.5, "lr": 1e-3},
        {"step": 4, "time": 2.0, "loss/total": 2.0, "loss/triplet": 0.4, "loss/all_negative_weight": 0.5},
        {"step": 4, "time": 2.5, "val/rsum": 100.0, "val/semantic/rsum": 150.0, "val/i2t_r1": 10.0},
        {"step": 6, "time": 3.0, "loss/total": 9.0},                      # lost in a kill: rewritten after resume
        {"step": 6, "time": 4.0, "loss/total": 1.5, "loss/triplet": 0.3},
        {"step": 6, "time": 4.5, "val/rsum": 80.0, "val/semantic/rsum": 140.0},
        {"step": 8, "time": 5.0, "grad_norm": 1.0},                      # no loss: not a curve row
        {"step": 8, "time": 5.5, "val/rsum": 90.0},                       # an older run: no semantic validation
        {"step": 8, "time": 6.0, "mean_abs_s_local": 0.02, "loss/total": 1.0, "logit_scale": 14.0}]


def test_curves_keep_losses_and_both_validation_rsums_aligned_with_steps(tmp_path):
    _write_metrics(str(tmp_path), ROWS)
    c = curves.training_curves(str(tmp_path))
    assert c["train"] == {"step": [2, 4, 6, 8], "loss/total": [3.0, 2.0, 1.5, 1.0],
                          "loss/triplet": [0.5, 0.4, 0.3, None],
                          "loss/all_negative_weight": [None, 0.5, None, None],
                          "mean_abs_s_local": [None, None, None, 0.02], "logit_scale": [None, None, None, 14.0]}
    assert c["val"] == {"step": [4, 6, 8], "val/rsum": [100.0, 80.0, 90.0], "val/semantic/rsum": [150.0, 140.0, None]}
    # the drop is read on the RSUM the cell selected on: the semantic one where it was logged (150 → 140) ...
    assert curves.val_key(c) == "val/semantic/rsum" and curves.largest_val_drop(c) == pytest.approx(10.0)
    source_only = {**c, "val": {k: v for k, v in c["val"].items() if k != "val/semantic/rsum"}}
    assert curves.val_key(source_only) == "val/rsum"   # ... else the source one: 100 → 80, not recovered to 100
    assert curves.largest_val_drop(source_only) == pytest.approx(20.0)
    assert curves.last_value(c, "mean_abs_s_local") == 0.02 and curves.last_value(c, "loss/triplet") == 0.3
    assert curves.last_value(c, "nothing") is None
    assert curves.training_curves(str(tmp_path / "none")) == {}


def test_a_cut_short_last_line_is_skipped_with_a_warning(tmp_path):
    """A run killed mid-write leaves half a line: the curves and the stability column read the rest."""
    from mmjax.jsonl import JSONLWarning
    _write_metrics(str(tmp_path), ROWS[:3])
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "loss/tot')
    with pytest.warns(JSONLWarning, match=r"metrics\.jsonl:4: not a JSON object"):
        c = curves.training_curves(str(tmp_path))
    assert c["train"]["step"] == [2, 4] and c["val"]["val/rsum"] == [100.0]
    with pytest.warns(JSONLWarning):
        assert runner.training_stability(str(tmp_path))["steps_logged"] == 2


@pytest.mark.parametrize("vals,drop", [([1.0, 2.0, 3.0], 0.0), ([5.0, 1.0, 4.0, 0.5], 4.5), ([7.0], 0.0),
                                       ([], None), ([3.0, None, 1.0], 2.0)])
def test_largest_val_drop_against_a_brute_force_reference(vals, drop):
    got = curves.largest_val_drop({"val": {"step": list(range(len(vals))), "val/rsum": vals}})
    v = [x for x in vals if x is not None]
    reference = max((v[j] - v[i] for i in range(len(v)) for j in range(i + 1)), default=None)
    assert got == reference == drop


def test_records_without_curves_get_them_from_the_cell_directory(tmp_path):
    """A record written before records carried curves gets them from its cell's metrics.jsonl (load_cell and the
    archive); a record restored from the archive does not take another run's."""
    cell = grid.make_grid(1, ["vse"])[0]
    out, store = str(tmp_path / "out"), str(tmp_path / "records")
    rec = record("vse", 0, converged_metrics("vse", 400.0, 300.0))
    del rec["curves"]
    workdir = cell.workdir(out)
    _write_metrics(workdir, ROWS)
    runner._write_json(os.path.join(workdir, "cell.json"), rec)
    assert runner.load_cell(cell, out)["curves"]["val"]["val/semantic/rsum"] == [150.0, 140.0, None]
    archive.save([cell], out, store, "default")
    assert json.load(open(archive.record_path(store, "default", "vse", 0)))["curves"]["train"]["step"] == [2, 4, 6, 8]
    rec["restored_from"] = "records/default/vse/seed0.json"
    runner._write_json(os.path.join(workdir, "cell.json"), rec)
    assert "curves" not in runner.load_cell(cell, out)


def _curved(name, seed, budget, val, drop_to=None):
    r = record(name, seed, converged_metrics(name, 400.0, 300.0), budget=budget)
    r["curves"] = {"train": {"step": [1, 2, 3], "loss/triplet": [0.3, 0.2, 0.4], "loss/total": [2.0, 1.0, 1.5],
                             "loss/all_negative_weight": [1.0, 0.5, 0.0]},
                   "val": {"step": [2, 3], "val/rsum": [val, val if drop_to is None else drop_to]}}
    if budget != "default":  # the quick grid validated on the source ground truth only
        r["curves"]["val"]["val/semantic/rsum"] = [val + 50, val + 60]
    return r


def _grid_table(md):
    quick = section(md, "The quick budget (2 epochs)")
    return quick.split("**Grid and budget (2 epochs)**")[1].split("**Retrieval")[0]


def _legends(monkeypatch):
    legends, save = [], figures._save

    def keep(fig, path):
        if path.endswith("training_curves.png"):
            legends.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        return save(fig, path)
    monkeypatch.setattr(figures, "_save", keep)
    return legends


def test_the_report_draws_the_converged_curves_and_the_quick_stability_column(tmp_path, monkeypatch):
    """The training-curves figure shows the converged cells when there are any (else the quick grid's), one legend
    entry per cell, the hard-negative ramp shaded; the quick grid table gives the largest validation drop."""
    legends = _legends(monkeypatch)
    conv = [_curved(n, k, "converged", 300.0) for n in ("sc_divmmd", "sh_full") for k in range(2)]
    quick = [_curved("vse", k, "default", 300.0, drop_to=290.0 + k) for k in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns about a legend without labelled lines
        rep = report.write_report(conv + quick, str(tmp_path), command="c")
    assert (tmp_path / rep["figures"]["training_curves"]).read_bytes()[:8] == PNG
    cells = [grid.SPEC_BY_NAME[n].label for n in ("sc_divmmd", "sh_full")]
    assert [x for x in legends if x != "hard-negative ramp"] == cells and "hard-negative ramp" in legends
    assert rep["aggregates"]["default"]["vse"]["val_drop"]["values"] == [10.0, 9.0]
    md = (tmp_path / "reproduction.md").read_text()
    row = table_row(_grid_table(md), "VSE∞ (K = 1)")
    assert "| 9.50 ± 0.71 |" in row                       # largest val drop, mean ± std over the two seeds
    legends.clear()
    rep = report.write_report(quick, str(tmp_path / "quick"), command="c")   # no converged records: the quick grid
    assert "training_curves" in rep["figures"] and legends[:1] == [grid.SPEC_BY_NAME["vse"].label]


def test_cells_where_only_some_seeds_carry_curves(tmp_path, monkeypatch):
    """Records written before the runner kept curves have none: the figure labels each cell by the seeds it draws,
    and the stability column says how many seeds its number covers."""
    legends = _legends(monkeypatch)
    recs = [_curved("sh_full", 1, "default", 300.0, drop_to=296.0), record("sh_full", 0,
                                                                           converged_metrics("sh_full", 1.0, 1.0))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.write_report(recs, str(tmp_path), command="c")
    assert "S_H, Div+MMD+GD+ISD (MaxMatch) (1 of 2 seeds)" in legends
    grid_table = _grid_table((tmp_path / "reproduction.md").read_text())
    assert "| 4.00 (n = 1) |" in table_row(grid_table, "S_H, Div+MMD+GD+ISD (MaxMatch)")
    assert report.write_report([r for r in recs if not r["curves"]], str(tmp_path / "none"),
                               command="c")["figures"].get("training_curves") is None


def test_plateau_step_is_where_validation_stays_near_its_best():
    def c(values, key="val/semantic/rsum"):
        return {"val": {"step": [10 * (i + 1) for i in range(len(values))], key: values}}
    assert curves.plateau_step(c([400.0, 450.0, 455.0, 457.0, 456.0, 457.5])) == 40   # 455 is 2.5 below 457.5
    assert curves.plateau_step(c([400.0, 450.0, 455.0, 457.0, 456.0, 457.5]), within=3.0) == 30
    assert curves.plateau_step(c([400.0, 420.0, 460.0])) == 30                          # still rising: the last
    assert curves.plateau_step(c([450.0, 430.0, 449.0])) == 30                          # a dip resets it
    assert curves.plateau_step(c([300.0, 310.0], key="val/rsum")) == 20                  # source RSUM when alone
    assert curves.plateau_step({}) is None and curves.plateau_step(c([])) is None


def test_the_budget_check_gives_where_each_run_levels_off_and_the_pair_at_both_budgets():
    def run(name, budget, sem, epochs, vals):   # 4 validations at epochs/4, epochs/2, … of 100 steps per epoch
        return record(name, 0, converged_metrics(name, sem, sem - 100), budget=budget,
                      steps={"final": 100 * epochs, "best": 50 * epochs},
                      curves={"val": {"step": [25 * epochs * (i + 1) for i in range(4)], "val/semantic/rsum": vals}})
    recs = [run("sc_divmmd", "converged", 400.0, 10, [380.0, 399.0, 400.0, 400.5]),
            run("sc_divmmd", "converged_x2", 410.0, 20, [380.0, 405.0, 409.5, 410.0]),
            run("sh_full", "converged", 405.0, 10, [390.0, 404.0, 405.0, 405.0]),
            run("sh_full", "converged_x2", 420.0, 20, [390.0, 410.0, 415.0, 420.0])]
    text = "\n".join(tables.budget_check_section(report.build_report(recs, command="c"), tables.markdown_table))
    assert table_row(text, "smooth-Chamfer, Div+MMD") == \
        "| smooth-Chamfer, Div+MMD | 0 | 400.00 | 410.00 | 300.00 | 310.00 | 5.0 / 15.0 |"
    assert table_row(text, "S_H, Div+MMD+GD+ISD (MaxMatch)").endswith("| 5.0 / 20.0 |")   # 20 ep: still rising
    assert "sh_full − sc_divmmd, seed 0: Δ +5.00 at 10 epochs, +10.00 at 20 (semantic RSUM), a move of +5.00" in text
    # seeds 1–2 at 10 epochs give the cells' seed SD: s_p = 1 (ν = 4), band ± t_{0.975, 4}·2 = ±5.55
    more = [record(n, s, converged_metrics(n, v, v - 100), budget="converged")
            for n, vals in (("sc_divmmd", (399.0, 401.0)), ("sh_full", (404.0, 406.0))) for s, v in zip((1, 2), vals)]
    text = "\n".join(tables.budget_check_section(report.build_report(recs + more, command="c"), tables.markdown_table))
    assert "a move of +5.00 against ±5.55 (ν = 4), **within** the band" in text
    m = converged_metrics("sh_full", 430.0, 330.0)
    wide = [dict(r, metrics={"best": m, "final": m}) if (r["budget"], r["name"]) == ("converged_x2", "sh_full") else r
            for r in recs]
    text = "\n".join(tables.budget_check_section(report.build_report(wide + more, command="c"), tables.markdown_table))
    assert "a move of +15.00 against ±5.55 (ν = 4), **beyond** the band" in text
    no_curves = [dict(r, curves={}) for r in recs]
    text = "\n".join(tables.budget_check_section(report.build_report(no_curves, command="c"), tables.markdown_table))
    assert table_row(text, "smooth-Chamfer, Div+MMD").endswith("| – / – |")
