"""Committed cell records (`reproduce.archive`): save, restore into a fresh output directory, `load_all` over every
budget, the checks on a misplaced or unreadable record, and the command line archiving each record as soon as its
cell finishes."""

import json
import os

import pytest

from reproduce import __main__ as cli
from reproduce import archive, grid, runner
from tests.reproduce.helpers import PNG, converged_metrics, record


def _records(names, seeds, budget="default"):
    return [record(n, k, converged_metrics(n, 400.0 + k, 300.0 + k), budget=budget) for k in range(seeds)
            for n in names]


def _finished(out, records, cells):
    by_key = {(r["name"], r["seed"]): r for r in records}
    for cell in cells:
        os.makedirs(cell.workdir(out), exist_ok=True)
        runner._write_json(os.path.join(cell.workdir(out), "cell.json"), by_key[(cell.name, cell.seed)])


def test_save_then_restore_into_a_fresh_directory(tmp_path):
    cells = grid.make_grid(2, ["sh_full", "vse"])
    records = _records(["sh_full", "vse"], 2, "converged")
    for r in records:
        if r["name"] == "sh_full":
            r["arrays"] = {"best": {"element_similarity": [[0.9, 0.1], [0.2, 0.8]]}, "final": {}}
            r["figures"]["best"]["element_similarity"] = str(tmp_path / "scratch" / "gone.png")  # a scratch path
    out, store = str(tmp_path / "out"), str(tmp_path / "records")
    _finished(out, records, cells)
    written = archive.save(cells, out, store, "converged")
    assert sorted(os.path.relpath(p, store) for p in written) == sorted(
        os.path.join("converged", c.name, f"seed{c.seed}.json") for c in cells)
    saved = json.load(open(archive.record_path(store, "converged", "sh_full", 0)))
    assert saved["figures"] == {"best": {}, "final": {}}  # no scratch paths in the committed copy
    assert saved["metrics"] == records[0]["metrics"] and saved["machine"] == records[0]["machine"]
    assert archive.save(cells, out, store, "converged") == []  # unchanged records are not rewritten

    fresh = str(tmp_path / "fresh")
    restored = archive.restore(cells, fresh, store, "converged")
    assert sorted(restored) == sorted(f"{c.name}/seed{c.seed}" for c in cells)
    back = runner.load_cell(cells[0], fresh)
    assert back["metrics"] == saved["metrics"] and back["restored_from"].endswith(
        os.path.join("converged", "sh_full", "seed0.json"))
    heat = back["figures"]["best"]["element_similarity"]
    assert heat.startswith(fresh) and open(heat, "rb").read(8) == PNG  # re-drawn from the stored matrix
    assert "element_similarity" not in runner.load_cell(cells[1], fresh)["figures"]["best"]   # vse: no matrix
    assert archive.restore(cells, fresh, store, "converged") == []  # cells the directory has are left alone
    assert archive.restore(cells, str(tmp_path / "other"), store, "default") == []   # another budget's records
    assert archive.archived_seeds(store, "converged") == 2 and archive.archived_seeds(store, "long") == 0
    # a restored cell is skipped by the runner, and saving it again changes nothing in the archive
    assert runner.run_grid(cells, fresh, "converged", log=lambda s: None)["skipped"] == restored
    assert archive.save(cells, fresh, store, "converged") == []


@pytest.mark.parametrize("field,value", [("name", "sc_full"), ("seed", 1), ("budget", "long")])
def test_a_misplaced_record_is_refused_naming_the_file(tmp_path, field, value):
    cells = grid.make_grid(1, ["sh_full", "vse"])
    store = str(tmp_path / "records")
    for r in _records(["vse", "sh_full"], 1):
        path = archive.record_path(store, "default", r["name"], 0)
        if r["name"] == "sh_full":
            r[field] = value
        archive._write_json(path, r)
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match=rf"sh_full.seed0\.json: field '{field}' is {value!r}"):
        archive.restore(cells, out, store, "default")
    assert not os.path.exists(out)  # nothing is written before every record has been checked
    with pytest.raises(ValueError, match=rf"sh_full.seed0\.json: field '{field}'"):
        archive.load_all(store)


def test_an_unreadable_record_is_refused(tmp_path):
    cells = grid.make_grid(1, ["vse"])
    path = archive.record_path(str(tmp_path), "default", "vse", 0)
    os.makedirs(os.path.dirname(path))
    open(path, "w").write("{not json")
    for call in (lambda: archive.restore(cells, str(tmp_path / "out"), str(tmp_path), "default"),
                 lambda: archive.load_all(str(tmp_path))):
        with pytest.raises(ValueError, match=r"vse.seed0\.json: unreadable cell record"):
            call()
    archive._write_json(path, {"name": "vse", "seed": 0, "budget": "default"})
    with pytest.raises(ValueError, match=r"not a cell record \(missing \['metrics', 'wall_s', 'group'\]\)"):
        archive.restore(cells, str(tmp_path / "out"), str(tmp_path), "default")
    archive._write_json(path, [1, 2])
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        archive.load_all(str(tmp_path))


def test_load_all_reads_every_budget_in_order(tmp_path):
    store = tmp_path / "records"
    assert archive.load_all(str(store)) == []   # no archive yet
    recs = _records(["sh_full", "sc_divmmd"], 2, "converged") + _records(["vse"], 1) + _records(["sh_full"], 1,
                                                                                              "converged_x2")
    for r in recs:
        archive._write_json(archive.record_path(str(store), r["budget"], r["name"], r["seed"]), r)
    # files that are not seed<k>.json records are left alone
    (store / "default" / "vse" / "notes.json").write_text("not a record")
    (store / "default" / "vse" / "seedx.json").write_text("not a record")
    (store / "default" / "vse" / "seed0.json.tmp").write_text("{half a fi")
    (store / "README.md").write_text("the archive")
    got = archive.load_all(str(store))
    assert [(r["budget"], r["name"], r["seed"]) for r in got] == [
        ("converged", "sc_divmmd", 0), ("converged", "sc_divmmd", 1), ("converged", "sh_full", 0),
        ("converged", "sh_full", 1), ("converged_x2", "sh_full", 0), ("default", "vse", 0)]
    for r in got:
        assert r["restored_from"] == archive.record_path(str(store), r["budget"], r["name"], r["seed"])
        assert {k: v for k, v in r.items() if k != "restored_from"} in recs


def test_load_all_ignores_a_stray_file_beside_the_cell_directories(tmp_path):
    r = _records(["vse"], 1)[0]
    archive._write_json(archive.record_path(str(tmp_path), "default", "vse", 0), r)
    (tmp_path / "default" / "README.md").write_text("what these records are")
    assert [x["name"] for x in archive.load_all(str(tmp_path))] == ["vse"]


def test_each_record_is_archived_as_soon_as_its_cell_finishes(tmp_path, monkeypatch):
    """A grid stopped mid-way (here: the second cell, vse, raises KeyboardInterrupt, as a killed session would) keeps
    the first cell's record in the archive."""
    store, out = str(tmp_path / "records"), str(tmp_path / "out")
    seen_in_archive = []
    by_name = {r["name"]: r for r in _records(["vse", "sh_full"], 1, "converged")}

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        seen_in_archive.append(sorted(os.path.relpath(os.path.join(d, f), store)
                                      for d, _, files in os.walk(store) for f in files))
        if cell.name == "vse":
            raise KeyboardInterrupt  # not an Exception: the grid stops here, as a stopped session would
        _finished(out_, [by_name[cell.name]], [cell])
        return by_name[cell.name]

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    monkeypatch.setattr(runner, "code_version", lambda: {})
    argv = ["--budget", "converged", "--seeds", "1", "--out", out, "--cells", "vse,sh_full", "--archive", store]
    with pytest.raises(KeyboardInterrupt):
        cli.main(argv)
    assert seen_in_archive == [[], [os.path.join("converged", "sh_full", "seed0.json")]]


def test_a_preempted_grid_exits_75_with_the_finished_records_archived(tmp_path, monkeypatch, capsys):
    from mmjax.train import EXIT_PREEMPTED, TrainingPreempted
    store, out = str(tmp_path / "records"), str(tmp_path / "out")
    by_name = {r["name"]: r for r in _records(["vse", "sh_full"], 1, "converged")}

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        if cell.name == "vse":
            raise TrainingPreempted("SIGTERM at step 3; checkpoint saved", step=3)
        _finished(out_, [by_name[cell.name]], [cell])
        return by_name[cell.name]

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    monkeypatch.setattr(runner, "code_version", lambda: {})
    argv = ["--budget", "converged", "--seeds", "1", "--out", out, "--cells", "vse,sh_full", "--archive", store]
    assert cli.main(argv) == EXIT_PREEMPTED == 75
    assert "preempted: SIGTERM at step 3; checkpoint saved; rerun the same command" in capsys.readouterr().out
    assert [os.path.relpath(p, store) for p in _json_files(store)] == [os.path.join("converged", "sh_full",
                                                                                     "seed0.json")]
    assert not os.path.exists(os.path.join(out, "reproduction.md"))   # no report from a grid stopped mid-way


def _json_files(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".json"))


def test_a_fresh_output_directory_restores_the_runs_budget_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """A fresh checkout: the command line restores this budget's archived records (not another budget's), skips
    those cells, saves nothing new, and reports every archived budget."""
    store, out = tmp_path / "records", str(tmp_path / "out")
    for r in _records(["vse", "sh_full"], 2, "converged") + _records(["vse"], 1):
        archive._write_json(archive.record_path(str(store), r["budget"], r["name"], r["seed"]), r)
    monkeypatch.setattr(runner, "run_cell", lambda *a, **k: pytest.fail("a restored cell was run again"))
    monkeypatch.setattr(runner, "code_version", lambda: {})
    argv = ["--budget", "converged", "--seeds", "2", "--out", out, "--cells", "vse,sh_full", "--archive", str(store)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "restored 4 cell record(s)" in printed and "0 cell(s) run, 4 skipped, 0 failed" in printed
    assert "0 cell record(s) and 0 base export(s) saved" in printed
    restored = json.load(open(os.path.join(out, "cells", "vse", "seed0", "cell.json")))
    assert restored["budget"] == "converged" and restored["restored_from"] == archive.record_path(
        str(store), "converged", "vse", 0)
    md = open(os.path.join(out, "reproduction.md")).read()
    assert "Records: 4 run(s) at the converged budget, 1 run(s) at the default budget." in md
    assert f"Regenerate: `python -m reproduce --report-only --archive {store} --out {out}`" in md
