"""Training curves in cell records (`reproduce.curves`), their backfill from metrics.jsonl, the largest
validation drop, and the report's curve figure and stability column."""

import json
import os

import pytest

from reproduce import archive, curves, grid, report, runner
from tests.module_loader import load

_report_tests = load("tests/reproduce/test_report.py", "_reproduce_report_tests_curves")


def _write_metrics(workdir, rows):
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


ROWS = [{"step": 2, "time": 1.0, "loss/total": 3.0, "loss/triplet": 0.5, "lr": 1e-3},
        {"step": 4, "time": 2.0, "loss/total": 2.0, "loss/triplet": 0.4, "loss/all_negative_weight": 0.5},
        {"step": 4, "time": 2.5, "val/rsum": 100.0, "val/i2t_r1": 10.0},
        {"step": 6, "time": 3.0, "loss/total": 9.0},                      # lost in a kill: rewritten after resume
        {"step": 6, "time": 4.0, "loss/total": 1.5, "loss/triplet": 0.3},
        {"step": 6, "time": 4.5, "val/rsum": 80.0},
        {"step": 8, "time": 5.0, "grad_norm": 1.0},                      # no loss: not a curve row
        {"step": 8, "time": 5.5, "val/rsum": 90.0}]


def test_curves_keep_losses_and_validation_rsum_aligned_with_steps(tmp_path):
    _write_metrics(str(tmp_path), ROWS)
    c = curves.training_curves(str(tmp_path))
    assert c["train"] == {"step": [2, 4, 6], "loss/total": [3.0, 2.0, 1.5], "loss/triplet": [0.5, 0.4, 0.3],
                          "loss/all_negative_weight": [None, 0.5, None]}
    assert c["val"] == {"step": [4, 6, 8], "val/rsum": [100.0, 80.0, 90.0]}
    assert curves.largest_val_drop(c) == pytest.approx(20.0)   # 100 → 80, not recovered to 100
    assert curves.training_curves(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("vals,drop", [([1.0, 2.0, 3.0], 0.0), ([5.0, 1.0, 4.0, 0.5], 4.5), ([7.0], 0.0),
                                       ([], None)])
def test_largest_val_drop_against_a_brute_force_reference(vals, drop):
    got = curves.largest_val_drop({"val": {"step": list(range(len(vals))), "val/rsum": vals}})
    reference = max((vals[j] - vals[i] for i in range(len(vals)) for j in range(i + 1)), default=None)
    assert got == reference == drop


def test_records_without_curves_get_them_from_the_cell_directory(tmp_path):
    """A record written before records carried curves: load_cell, the archive and the long-budget loader add them
    from the cell's metrics.jsonl."""
    cell = grid.make_grid(1, ["vse"])[0]
    out, store = str(tmp_path / "out"), str(tmp_path / "records")
    record = _report_tests._record("vse", 0, 300.0)
    assert "curves" not in record
    workdir = cell.workdir(out)
    _write_metrics(workdir, ROWS)
    runner._write_json(os.path.join(workdir, "cell.json"), record)
    assert runner.load_cell(cell, out)["curves"]["val"]["val/rsum"] == [100.0, 80.0, 90.0]
    archive.save([cell], out, store, "default")
    saved = json.load(open(archive.record_path(store, "default", "vse", 0)))
    assert saved["curves"]["train"]["step"] == [2, 4, 6]
    # A record restored from the archive into a directory where another run left its metrics.jsonl (a CLIP
    # retrained for its export) keeps the curves it has, and none from that other run.
    record["restored_from"] = "records/default/vse/seed0.json"
    runner._write_json(os.path.join(workdir, "cell.json"), record)
    assert "curves" not in runner.load_cell(cell, out)


def test_report_has_the_curve_figure_and_the_stability_column(tmp_path):
    records = _report_tests._records(2)
    for r in records:
        r["curves"] = {"train": {"step": [1, 2, 3], "loss/triplet": [0.3, 0.2, 0.4], "loss/total": [2.0, 1.0, 1.5],
                                 "loss/all_negative_weight": [1.0, 0.5, 0.0]},
                       "val": {"step": [2, 3], "val/rsum": [300.0, 290.0 + r["seed"]]}}
        if r["name"].startswith("flowclip"):  # the local branch's size at the end: its evidence in the claims
            r["curves"]["train"]["mean_abs_s_local"] = [0.001, 0.01, 0.02 + 0.01 * r["seed"]]
    rep = report.write_report(records, str(tmp_path), budget="default", seeds=2, command="python -m x")
    assert rep["cells"]["flowclip_hnb"]["curve_end"]["mean_abs_s_local"]["mean"] == pytest.approx(0.025)
    evidence = {r["id"]: r["evidence"] for r in rep["claims"]}
    assert "mean |s_L| 0.025 (flowclip_hnb) against a global cosine score" in evidence["binding_hnb"]
    assert "s_L" not in evidence["ablation_2"]
    assert "training_curves" in rep["figures"]
    assert (tmp_path / rep["figures"]["training_curves"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["cells"]["sh_full"]["val_drop"]["values"] == [10.0, 9.0]
    md = (tmp_path / "reproduction.md").read_text()
    grid_table = md.split("## Grid and budget")[1].split("## MaxMatch ablation")[0]
    assert "largest val drop" in grid_table and "| 9.50 ± 0.71 |" in grid_table


def test_cells_where_only_some_seeds_carry_curves(tmp_path, monkeypatch):
    """Records written before the runner kept curves have none: the figure labels each cell by the seeds it draws
    (no legend-less panel), and the stability column says how many seeds its number covers."""
    import warnings
    from reproduce import figures
    records = _report_tests._records(2)
    for r in records:
        if r["seed"] == 1:
            r["curves"] = {"train": {"step": [1, 2], "loss/triplet": [0.3, 0.2], "loss/total": [2.0, 1.0]},
                           "val": {"step": [1, 2], "val/rsum": [300.0, 296.0]}}
            if r["name"] == "flowclip_hnb":
                r["curves"]["train"]["mean_abs_s_local"] = [0.01, 0.02]
    legends = []
    save = figures._save

    def keep_legend(fig, path):
        if path.endswith("training_curves.png"):
            legends.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        return save(fig, path)

    monkeypatch.setattr(figures, "_save", keep_legend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns about a legend without labelled lines
        rep = report.write_report(records, str(tmp_path), budget="default", seeds=2, command="python -m x")
    assert "S_H, Div+MMD+GD+ISD (MaxMatch) (1 of 2 seeds)" in legends
    evidence = next(r["evidence"] for r in rep["claims"] if r["id"] == "binding_hnb")
    assert "mean |s_L| 0.020 (flowclip_hnb, 1 of 2 seeds)" in evidence
    grid_table = (tmp_path / "reproduction.md").read_text().split("## Grid and budget")[1].split("## MaxMatch")[0]
    assert "| 4.00 (n = 1) |" in grid_table and "carry their training curves" in grid_table
